"""Lab (issue 27): the shipped table with each plain general entry's stages moved to a count the
chunked K loop takes (dispatch/general.py: chunk_fits): 128-row tiles s4, 64-row tiles s8 where
it fits in shared memory, else s4; every other entry as it is. Timed against the shipped table
with the chunked loop off (lab/bench_chunk.py), it says whether chunked configurations beat the
rolled ones the tuner picked. Usage: python lab/chunk_table.py OUT.json"""
import json
import sys
from pathlib import Path

from fp8gemm.dispatch import GemmDesc
from fp8gemm.dispatch import general as g
from fp8gemm.dispatch import selector as sel


def main(out):
    table = json.loads((Path(g.__file__).parent / "h200.json").read_text())
    moved = 0
    for e in table["entries"]:
        c = sel.from_entry(e)
        if type(c) is not g.General or any(g.chunk_fits(c, ch) for ch in g.CHUNKS):
            continue
        for stages in ((4,) if c.block_m == 128 else (8, 4)):
            d = g.General(c.block_n, stages, c.group_m, c.splits, c.block_m)
            if d.is_valid(GemmDesc(e["m"], e["n"], e["k"])) and g.chunk_fits(d, 8 if stages == 8 else 4):
                e["stages"] = stages
                moved += 1
                break
    Path(out).write_text(json.dumps(table, indent=1) + "\n")
    print(f"{moved} entries moved to chunk-fitting stages -> {out}")


if __name__ == "__main__":
    main(sys.argv[1])
