"""A `kcert model` file: the zoo's Llama against its faithful port in Meta's layout (benchmarks/model_port.py), matched
through ``rename`` and ``adapt``, with the LM loss end to end (docs/model.md, "Another framework's names"):

    OMP_NUM_THREADS=1 torchrun --nproc-per-node 2 -m kcert model benchmarks/model_port_pair.py --json OUT.json
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kcert  # noqa: E402
import model_port  # noqa: E402
import model_zoo  # noqa: E402

ref = model_zoo.build("llama")
faithful = kcert.ModelPair("port_faithful", ref, model_port.from_hf(ref), model_zoo.inputs("llama"),
                           loss=model_port.loss, options={"rename": model_port.RENAME, "adapt": model_port.ADAPT})
