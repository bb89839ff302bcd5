"""``python -m fp8gemm``: the doctor (fp8gemm/doctor.py)."""
import sys

from .doctor import main

sys.exit(main())
