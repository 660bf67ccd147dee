"""`kcert model` under autocast (docs/model.md, "Mixed precision"): the zoo's Llama in float32, three pairs.

- `rope_autocast`: prod's rotary embedding as transformers computed it before PR #29285 (the angles as a matrix
  product of inv_freq and the positions, autocast left on), certified with autocast=torch.bfloat16: the defect
  the autocast run has;
- `rope_float32`: the same pair without autocast (float32 throughout: the same angles on both sides);
- `sdpa_autocast`: eager against sdpa attention under autocast=torch.bfloat16 (benign).

Rows: the rotary embedding, layer 0's attention and MLP, forward, and the end-to-end row with the LM loss; seed 0.

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_amp.py -R 1024 --markdown docs/model.md
"""

import argparse
import copy
import time
import types
from pathlib import Path

import torch

import kcert
import model_study
from kcert.model.results import bias_effect
import model_zoo

MARK = "model_amp"
ROWS = ("model.rotary_emb", "model.layers.0.self_attn", "model.layers.0.mlp")


def rotary_as_matmul(self, x, position_ids):
    """transformers' Llama rotary embedding before PR #29285: the angles as a matrix product, autocast left on."""
    inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def pairs() -> dict[str, tuple]:
    """name -> (ref, prod, autocast, kind)."""
    ref = model_zoo.build("llama").float()
    rope = copy.deepcopy(ref)
    rope.model.rotary_emb.forward = types.MethodType(rotary_as_matmul, rope.model.rotary_emb)
    sdpa = model_zoo.build("llama", attn="sdpa").float()
    sdpa.load_state_dict(ref.state_dict())
    return {"rope_autocast": (ref, rope, torch.bfloat16, "defect"), "rope_float32": (ref, rope, None, "defect"),
            "sdpa_autocast": (ref, sdpa, torch.bfloat16, "benign")}


def run(name: str, ref, prod, autocast, replicates: int) -> dict:
    start = time.perf_counter()
    cert = kcert.certify_model(ref, prod, model_zoo.inputs("llama"), modules=kcert.Modules(names=ROWS),
                               backward=False, loss=model_zoo.lm_loss, dtype=torch.float32, autocast=autocast,
                               replicates=replicates, name=name)
    rows = {}
    for r in cert.rows:
        bias = bias_effect(r.certificate) if r.certificate else None
        rows[r.module or "(model)"] = (r.verdict.value, r.deciding_gate or "-", bias)
    return {"pair": name, "rows": rows, "first_failure": cert.first_failure.module if cert.first_failure else None,
            "wall": time.perf_counter() - start}


def markdown(results: list[dict], replicates: int) -> str:
    names = list(ROWS) + ["(model)"]
    lines = [f"R = {replicates} (kcert's looks), the zoo's Llama in float32, forward rows and end to end (logits, LM "
             "loss); each cell: verdict, deciding gate, largest bias effect (ULPs of the harm format: bfloat16 here)."
             "", "",
             "| pair | autocast | " + " | ".join(f"`{n}`" for n in names) + " | first failure | wall |",
             "| --- | --- | " + " | ".join("---" for _ in names) + " | --- | --- |"]
    for r in results:
        cells = []
        for n in names:
            verdict, gate, bias = r["rows"].get(n, ("-", "-", None))
            cells.append(f"{verdict} ({gate}, {bias:.2g} ULP)" if bias is not None else verdict)
        lines.append(f"| `{r['pair']}` | {r['autocast']} | " + " | ".join(cells) +
                     f" | {r['first_failure'] or 'none'} | {r['wall']:.0f} s |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-R", "--replicates", type=int, default=1024)
    ap.add_argument("--markdown", default=None, help="write the table between this file's markers")
    args = ap.parse_args()
    torch.set_num_threads(1)
    results = []
    for name, (ref, prod, autocast, _) in pairs().items():
        result = run(name, ref, prod, autocast, args.replicates)
        result["autocast"] = str(autocast).removeprefix("torch.") if autocast else "none"
        results.append(result)
        print(f"{name}: {result['rows']} first failure {result['first_failure']}, {result['wall']:.0f} s", flush=True)
    table = markdown(results, args.replicates)
    print(table)
    if args.markdown:
        model_study.write_markdown(Path(args.markdown), table + "\n", MARK)


if __name__ == "__main__":
    main()
