"""Exit 0 when torch sees a CUDA device and weft's CUDA backend loads in the
same process, else print why and exit 77 (tests/gpu: skipped, no GPU).
Arguments: further modules the test needs (missing: exit 77, named)."""
import importlib
import sys

for mod in sys.argv[1:]:
    try:
        importlib.import_module(mod)
    except ImportError as e:
        print("no %s: %s" % (mod, e))
        sys.exit(77)

try:
    import torch
except ImportError as e:
    print("no torch: %s" % e)
    sys.exit(77)
if not torch.cuda.is_available():
    print("torch %s sees no CUDA device" % torch.__version__)
    sys.exit(77)
torch.zeros(1, device="cuda")  # loads torch's libcudart, which weft then shares
import weft.torch as hvd  # noqa: E402

ok, why = hvd.mpi_ops._cuda_status()
if not ok:
    print("torch has CUDA but weft's CUDA backend does not load: %s" % why)
    sys.exit(1)  # a GPU machine where weft cannot use it: a failure, not a skip
print("torch %s, CUDA %s, %d device(s)" % (torch.__version__, torch.version.cuda, torch.cuda.device_count()))
