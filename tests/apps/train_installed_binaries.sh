#!/usr/bin/env bash
# The programs a user runs, trained as a user would: the bundled demo config,
# copied into a scratch folder, trained a few steps by `strata-train run` and
# exported by `strata-train export`; then the same config trained by the `strata`
# app itself (offscreen) through its Start button and File > Export LoRA
# (--start --export-when-done --quit-when-done, app/strata/ScriptedRun.h). Each
# run must leave a checkpoint and a LoRA file. A program that cannot train (the
# app once had no model family linked in) fails here.
#   train_installed_binaries.sh BIN_DIR CONFIGS_DIR [app|no-app]
# BIN_DIR holds strata-train (and strata); CONFIGS_DIR the installed demo.yaml.
set -euo pipefail
BIN="$1"
CONFIGS="$2"
WITH_APP="${3:-app}"
STEPS=6
fail() { echo "FAIL: $*" >&2; exit 1; }
[ -x "$BIN/strata-train" ] || fail "$BIN/strata-train is not there"
[ -f "$CONFIGS/demo.yaml" ] || fail "$CONFIGS/demo.yaml is not there"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# A checkpoint and a LoRA file in the run folder, or the test fails naming what is missing.
expect_run_outputs() {
  local who="$1" run="$2"
  [ -d "$run" ] || fail "$who: no run folder $run"
  [ -f "$run/config.yaml" ] || fail "$who: $run has no config.yaml"
  find "$run" -path '*checkpoint*' -type f | grep -q . || fail "$who: $run has no checkpoint"
  find "$run/exports" -name '*.safetensors' -type f | grep -q . || fail "$who: $run/exports has no LoRA file"
  echo "$who: $(find "$run" -path '*checkpoint*' -type f | wc -l) checkpoint file(s), LoRA: $(cd "$run/exports" && find . -name '*.safetensors' | tr '\n' ' ')"
}

echo "== strata-train run, $STEPS steps of the demo"
mkdir "$WORK/cli"
cp "$CONFIGS/demo.yaml" "$WORK/cli/demo.yaml"
(cd "$WORK/cli" && "$BIN/strata-train" run demo.yaml --set train.steps=$STEPS --set sample.sample_every=0) \
  > "$WORK/cli.log" 2>&1 || { rc=$?; cat "$WORK/cli.log"; fail "strata-train run exited with $rc"; }
cat "$WORK/cli.log"
RUN="$(sed -n 's/^training [^ ]* in \(.*\) (step 0 of .*$/\1/p' "$WORK/cli.log" | head -1)"
[ -n "$RUN" ] || fail "strata-train run did not say where it trained"
case "$RUN" in /*) ;; *) RUN="$WORK/cli/$RUN" ;; esac
grep -q "^  base " "$WORK/cli.log" || fail "strata-train run did not say how the base is held"
expect_run_outputs "strata-train" "$RUN"

echo "== strata-train export"
"$BIN/strata-train" export "$RUN" --format kohya --out "$WORK/cli/exported" > "$WORK/export.log" 2>&1 ||
  { rc=$?; cat "$WORK/export.log"; fail "strata-train export exited with $rc"; }
cat "$WORK/export.log"
find "$WORK/cli/exported" -name '*.safetensors' -type f | grep -q . || fail "strata-train export wrote no LoRA file"

if [ "$WITH_APP" != app ]; then
  echo "the app is not part of this build: only strata-train was run"
  exit 0
fi
[ -x "$BIN/strata" ] || fail "$BIN/strata is not there"
echo "== strata (the app, offscreen): Start, $STEPS steps, File > Export LoRA"
mkdir "$WORK/app"
cp "$CONFIGS/demo.yaml" "$WORK/app/demo.yaml"
(cd "$WORK/app" && env -u STRATA_TRAIN_BIN QT_QPA_PLATFORM=offscreen "$BIN/strata" --settings "$WORK/app/settings.ini" --steps $STEPS \
   --start --export-when-done kohya --quit-when-done demo.yaml) > "$WORK/app.log" 2>&1 ||
  { rc=$?; cat "$WORK/app.log"; fail "strata exited with $rc"; }
cat "$WORK/app.log"
RUN="$(sed -n 's/^strata: started: run folder \(.*\), steps .*$/\1/p' "$WORK/app.log" | head -1)"
[ -n "$RUN" ] || fail "strata did not start a run"
case "$RUN" in /*) ;; *) RUN="$WORK/app/$RUN" ;; esac
grep -q "^strata: setup: base " "$WORK/app.log" || fail "strata did not say how the base is held"
# The app trains in a child process: the strata-train installed beside it, not another one.
TRAINER="$(sed -n 's/^strata: trained by \(.*\)$/\1/p' "$WORK/app.log" | head -1)"
[ "$TRAINER" -ef "$BIN/strata-train" ] || fail "strata trained through '$TRAINER', not $BIN/strata-train"
grep -q "^strata: finished at step $STEPS" "$WORK/app.log" || fail "strata's run did not finish at step $STEPS"
grep -q "^strata: exported: " "$WORK/app.log" || fail "strata's File > Export LoRA wrote nothing"
expect_run_outputs "strata" "$RUN"
echo "both programs trained the demo, saved a checkpoint and exported a LoRA"
