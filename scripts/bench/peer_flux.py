"""The peer to beat: one LoRA training step of a FLUX.1-dev-sized transformer in diffusers + peft (PyTorch eager),
random bf16 weights, on one GPU. Prints a JSON line per setting.

Needs torch and peft, and diffusers' package folder (src/diffusers of the huggingface/diffusers repository) in a
folder that PEER_DIFFUSERS names (the folder that holds `diffusers/`; default: .carry at the repository root).
Run it right after Strata's own benchmark on the same machine: GPU machines are noisy.
  PEER_DIFFUSERS=.carry PEER_SDP=flash PEER_ONLY=1024/0,1024/1,512/0 python3 scripts/bench/peer_flux.py
(The project's peer benchmark, ../shared/tools/bench_peer.py, kept here so the comparison can be rerun from
the repository; peak memory is printed to 0.001 GiB instead of 0.1.)
PEER_SDP: flash | cudnn | efficient (the default cuDNN attention failed in backward on PyTorch 2.11).
PEER_ONLY: resolution/checkpointing pairs to run."""
import json, os, sys, time
sys.path.insert(0, os.environ.get("PEER_DIFFUSERS", os.path.join(os.path.dirname(__file__), "..", "..", ".carry")))
import torch
from diffusers import FluxTransformer2DModel
from peft import LoraConfig

def flops_forward(cfg, t_img, t_txt):
    d = cfg["num_attention_heads"] * cfg["attention_head_dim"]; m = 4 * d
    dbl = t_img * (4 * d * d + 2 * d * m + 6 * d * d) + t_txt * (4 * d * d + 2 * d * m + 6 * d * d)  # qkv+out, mlp, mod
    T = t_img + t_txt
    sgl = T * (3 * d * d + d * m + (d + m) * d + 3 * d * d)
    attn = 2 * T * T * d  # QK^T and PV, multiply-adds
    return 2 * (cfg["num_layers"] * (dbl + attn) + cfg["num_single_layers"] * (sgl + attn))

cfg = dict(patch_size=1, in_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
           num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
           axes_dims_rope=[16, 56, 56])
torch.manual_seed(0)
if os.environ.get("PEER_SDP"):
    torch.backends.cuda.enable_cudnn_sdp(os.environ["PEER_SDP"] == "cudnn")
    torch.backends.cuda.enable_flash_sdp(os.environ["PEER_SDP"] == "flash")
    torch.backends.cuda.enable_mem_efficient_sdp(os.environ["PEER_SDP"] == "efficient")
ONLY = os.environ.get("PEER_ONLY")
with torch.device("cuda"):
    model = FluxTransformer2DModel(**cfg)
model.to(torch.bfloat16).requires_grad_(False)
targets = ["to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
           "ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj", "ff_context.net.2", "proj_mlp", "proj_out"]
model.add_adapter(LoraConfig(r=16, lora_alpha=16, target_modules=targets, init_lora_weights="gaussian"))
params = [p for p in model.parameters() if p.requires_grad]
print(json.dumps({"lora_params": sum(p.numel() for p in params), "lora_dtype": str(params[0].dtype),
                  "base_params": sum(p.numel() for p in model.parameters())}), flush=True)
opt = torch.optim.AdamW(params, lr=1e-4)
for res, gc in [(512, False), (1024, False), (512, True), (1024, True)]:
    if ONLY and f"{res}/{int(gc)}" not in ONLY.split(","): continue
    if gc: model.enable_gradient_checkpointing()
    else: model.disable_gradient_checkpointing()
    t_img = (res // 16) ** 2; t_txt = 512
    x = torch.randn(1, t_img, 64, device="cuda", dtype=torch.bfloat16)
    enc = torch.randn(1, t_txt, 4096, device="cuda", dtype=torch.bfloat16)
    pooled = torch.randn(1, 768, device="cuda", dtype=torch.bfloat16)
    img_ids = torch.zeros(t_img, 3, device="cuda"); side = res // 16
    img_ids[:, 1] = torch.arange(side, device="cuda").repeat_interleave(side); img_ids[:, 2] = torch.arange(side, device="cuda").repeat(side)
    txt_ids = torch.zeros(t_txt, 3, device="cuda")
    target = torch.randn_like(x)
    def step():
        out = model(hidden_states=x, encoder_hidden_states=enc, pooled_projections=pooled,
                    timestep=torch.tensor([0.5], device="cuda"), img_ids=img_ids, txt_ids=txt_ids,
                    guidance=torch.tensor([1.0], device="cuda")).sample
        loss = torch.nn.functional.mse_loss(out.float(), target.float())
        loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.reset_peak_memory_stats()
    for _ in range(3): step()
    torch.cuda.synchronize(); times = []
    for _ in range(10):
        t0 = time.perf_counter(); step(); torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
    times.sort(); med = times[len(times) // 2]
    f = 2 * flops_forward(cfg, t_img, t_txt)  # forward + input-gradient backward (frozen base)
    print(json.dumps({"peer": "diffusers+peft eager", "sdp": os.environ.get("PEER_SDP", "default"), "res": res, "grad_ckpt": gc, "step_s_median": round(med, 4),
                      "step_s_min": round(times[0], 4), "model_tflop_per_step": round(f / 1e12, 1),
                      "achieved_tflops": round(f / med / 1e12, 1), "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 3)}), flush=True)
