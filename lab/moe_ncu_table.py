"""Summarize `ncu --csv --page raw` output of lab/profile_moe.py (issue 29): per kernel of the
profiled layer, its time, DRAM bytes read / written, and the shared-memory bank conflicts of its
loads and stores (conflicts / wavefronts). The DRAM reads of each grouped GEMM that ran are set
against the ideal the profile process printed (IDEAL line: each active expert's weights once plus
the FP8 rows once) of both the L1 and the L2 GEMM (the layer may launch two of each, one empty).
Usage: python lab/moe_ncu_table.py NCU.csv PROCESS.log"""
import csv
import re
import sys

METRICS = {
    "us": "gpu__time_duration.sum",
    "dram_rd": "dram__bytes_read.sum",
    "dram_wr": "dram__bytes_write.sum",
    "ld_conf": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "st_conf": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "ld_wave": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "st_wave": "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
}
SCALE = {"ns": 1e-3, "us": 1.0, "usecond": 1.0, "nsecond": 1e-3, "msecond": 1e3, "ms": 1e3,
         "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}


def read_ncu(path):
    """[(kernel name, {key: value in us / bytes / counts})] in launch order."""
    with open(path) as fh:
        lines = [ln for ln in fh if ln.startswith('"')]
    rows = list(csv.reader(lines))
    head = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    names, units = rows[head], rows[head + 1]
    col = {name: i for i, name in enumerate(names)}
    out = []
    for r in rows[head + 2:]:
        if len(r) != len(names):
            continue
        vals = {}
        for key, metric in METRICS.items():
            if metric in col:
                raw = r[col[metric]].replace(",", "")
                try:
                    vals[key] = float(raw) * SCALE.get(units[col[metric]], 1.0)
                except ValueError:
                    pass
        out.append((r[col["Kernel Name"]], vals))
    return out


def read_ideal(path):
    for line in open(path):
        if line.startswith("IDEAL "):
            return {k: v for k, v in re.findall(r"(\w+)=(\S+)", line)}
    return {}


def main(ncu_csv, log):
    ideal = read_ideal(log)
    print(" ".join(f"{k}={v}" for k, v in ideal.items()))
    print(f"{'kernel':58} {'us':>8} {'DRAM rd MB':>10} {'wr MB':>7} {'ld conf/wave':>14} {'st conf/wave':>14}")
    for name, v in read_ncu(ncu_csv):
        short = re.sub(r"\(.*", "", name.replace("void ", "").replace("fp8gemm::", ""))[:58]
        ratio = ""
        if "gemm" in name and v.get("dram_rd", 0) > 1e6 and ideal:       # a grouped GEMM that ran
            ratio = (f"  read / ideal: as L1 {v['dram_rd'] / float(ideal['l1_weights_and_a']):.2f}, "
                     f"as L2 {v['dram_rd'] / float(ideal['l2_weights_and_a']):.2f}")
        conf = [f"{v.get(a, float('nan')):.0f}/{v.get(b, float('nan')):.0f}"
                for a, b in (("ld_conf", "ld_wave"), ("st_conf", "st_wave"))]
        print(f"{short:58} {v.get('us', float('nan')):8.2f} {v.get('dram_rd', 0) / 1e6:10.1f} "
              f"{v.get('dram_wr', 0) / 1e6:7.1f} {conf[0]:>14} {conf[1]:>14}{ratio}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
