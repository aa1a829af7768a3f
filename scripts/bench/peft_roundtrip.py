"""transformers + peft load the adapter folder Strata exported onto the base model,
and their logits are compared with Strata's (issue 16, item 6).

Strata's side (any machine, CPU is enough): the CI test writes the folder
    STRATA_PEFT_OUT=/tmp/peft_rt build/tests/strata_tests_families --gtest_filter='LlamaTrain.Thirty*'
which holds adapter/ (adapter_config.json + adapter_model.safetensors, as Strata
exported them after 30 steps) and strata_logits.safetensors (input_ids, attention_mask
of a left-padded batch, and Strata's logits with the adapter). Then:
    python3 scripts/bench/peft_roundtrip.py /tmp/peft_rt tests/fixtures/reference/causal_lm_a/model
Prints one JSON line; exit 1 when the logits differ by more than the tolerance where
the attention mask is 1 (rows of pad positions attend to nothing and are not compared)."""
import json, sys
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
from peft import PeftModel

out_dir, model_dir = sys.argv[1], sys.argv[2]
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
ref = load_file(f"{out_dir}/strata_logits.safetensors")
base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
model = PeftModel.from_pretrained(base, f"{out_dir}/adapter")
model.eval()
with torch.no_grad():
    # No position_ids: 0..L-1 counting the left padding, as Strata's trainer has them.
    logits = model(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"]).logits.float()
    with model.disable_adapter():
        plain = model(input_ids=ref["input_ids"], attention_mask=ref["attention_mask"]).logits.float()
keep = ref["attention_mask"].bool()
diff = (logits - ref["logits"].float()).abs()[keep].max().item()
adapter_effect = (logits - plain).abs()[keep].max().item()
lora_modules = sum(1 for n, _ in model.named_modules() if n.endswith("lora_A.default"))
result = {"check": "peft loads Strata's adapter", "lora_modules": lora_modules,
          "max_abs_diff_vs_strata": diff, "adapter_effect_max_abs": adapter_effect, "tolerance": tol,
          "ok": diff <= tol and adapter_effect > 10 * tol}
print(json.dumps(result), flush=True)
sys.exit(0 if result["ok"] else 1)
