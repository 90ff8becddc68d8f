#!/usr/bin/env bash
# dflash vs llama.cpp side by side (issues 11 and 15): `dflash bench` and `llama-bench` run
# ALTERNATELY on the same shape and file, same threads, and the table prints ours / theirs per
# cell: tg64, pp16, pp512 (tok/s) and our verify cost t(16)/t(1).
#
#   tools/bench/vs_llamacpp.sh --llama-cpp SRC [--build DIR] [--threads 2] [--rounds 3]
#                              [--cases gemma,qwen3-bf16,qwen3-q8,qwen3-f16,qwen3-q4km] [--jobs 1] [--ggml-cpu DIR]
#                              [--no-amx | --no-bf16 | --skylake | --avx2 | --avx-vnni]
#                              [--ggml-act int8x2,int8]
#
# --ggml-act MODES: our block-quantized GGUF variants (Gemma, Q8_0, Q4_K_M; not BF16 / F16) under
# each of these activation modes (dflash --ggml-act; default int8x2 only); a mode other than
# int8x2 adds rows tagged gguf-<mode> (int8: one int8 per activation block, llama.cpp's
# precision — the like-for-like row).
# --ggml-cpu DIR: load llama.cpp's CPU backend from DIR (LD_LIBRARY_PATH). On the Sapphire Rapids
# VM this was written on, a GGML_NATIVE ggml-cpu segfaults in its AMX matmul
# (ggml_backend_amx_mul_mat); `--no-amx` builds one with GGML_NATIVE=OFF and Zen 4's ISA
# (AVX-512 F/VNNI/BF16/VBMI) into <build>-noamx and uses it.
# --no-bf16: both programs on AVX-512 + VNNI without the AVX512_BF16 instructions (what Cascade
# Lake, Ice Lake and Tiger Lake have): ours with DFL_AVX512_BF16=0, llama.cpp with a ggml-cpu
# built for AVX-512 F/VNNI/VBMI, GGML_AVX512_BF16=OFF and no AMX into <build>-nobf16.
# --skylake: both on AVX-512 F/BW/DQ/VL without VNNI or BF16 (Skylake-SP / Skylake-X): ours with
# DFL_AVX512_VNNI=0 DFL_AVX512_BF16=0 DFL_AVX_VNNI=0 (its int8 kernels then AVX2's), llama.cpp
# with a ggml-cpu built with GGML_AVX512=ON and no VNNI / BF16 / VBMI into <build>-skylake.
# --avx2: both programs on their AVX2 code (an AVX2-only x86: Zen 1–3, Haswell … Comet Lake):
# ours with DFL_ISA=avx2 DFL_AVX_VNNI=0, llama.cpp with a ggml-cpu built for AVX2 + FMA + F16C +
# BMI2, no AVX-VNNI and no AVX-512 into <build>-avx2.
# --avx-vnni: both on AVX2 + AVX-VNNI (Alder Lake and later client cores, Sierra Forest): ours
# with DFL_ISA=avx2, llama.cpp's ggml-cpu built as for --avx2 plus GGML_AVX_VNNI into
# <build>-avxvnni.
#
# SRC: a llama.cpp source tree, or a bare git copy of one (e.g. the fetch tool's
# /work/.mirror/<owner>+llama.cpp/repo: its sources are `git archive`d beside the build dir).
# llama.cpp is built OUTSIDE this repo (default: <repo>/../llama.cpp-build, GGML_NATIVE=ON,
# target llama-bench); nothing of it is ever written into the repo.
# Cases:
#   gemma       the real Gemma-3-270M Q4_K_M GGUF (tools/models/gemma3_270m.sh fetches it)
#   qwen3-bf16  the random Qwen3-0.6B shape (tools/ref/make_bench_models.py) as a BF16 GGUF
#               (tools/bench/write_bench_gguf.py); ours on the GGUF and on the HF folder
#               (--weights bf16)
#   qwen3-q8    the same as a Q8_0 GGUF; ours on the GGUF and on the HF folder (--weights q8)
#   qwen3-f16   the same as an F16 GGUF (not in the default set)
#   qwen3-q4km  the same as Q4_K_M, made from the F16 GGUF by llama.cpp's own llama-quantize (built
#               beside llama-bench; not in the default set)
# Output: a markdown table on stdout (one line per case × our variant) plus the raw JSON of
# every run under $OUT (default /tmp/vs_llamacpp.<date>).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/../.." && pwd)
SRC=${LLAMA_CPP:-}
BUILD=$(cd "$REPO/.." && pwd)/llama.cpp-build
THREADS=2
ROUNDS=3
CASES=gemma,qwen3-bf16,qwen3-q8
JOBS=1
GGML_CPU=
NO_AMX=0
AVX2=0
NO_BF16=0
SKYLAKE=0
AVX_VNNI=0
GGML_ACTS=int8x2
DFLASH=${DFLASH:-$REPO/build/dflash}
CACHE=${DFLASH_CACHE:-$HOME/.cache/dflash}
BENCH_MODELS=${BENCH_MODELS:-/tmp/dflash-bench-models}
PY=${PYTHON:-}
OUT=${OUT:-/tmp/vs_llamacpp.$(date -u +%Y%m%dT%H%M%S)}

while [[ $# -gt 0 ]]; do
  case "$1" in
    --llama-cpp) SRC=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --ggml-cpu) GGML_CPU=$2; shift 2 ;;
    --no-amx) NO_AMX=1; shift ;;
    --no-bf16) NO_BF16=1; shift ;;
    --skylake) SKYLAKE=1; shift ;;
    --avx2) AVX2=1; shift ;;
    --avx-vnni) AVX_VNNI=1; shift ;;
    --ggml-act) GGML_ACTS=$2; shift 2 ;;
    -h|--help) sed -n '2,46p' "$0"; exit 0 ;;
    *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
done

BUILD=$(mkdir -p "$BUILD" && cd "$BUILD" && pwd)
case "$BUILD/" in "$REPO"/*) echo "refusing to build llama.cpp inside the repo ($BUILD)" >&2; exit 2 ;; esac
LLAMA_BENCH=$BUILD/bin/llama-bench
LLAMA_QUANTIZE=$BUILD/bin/llama-quantize

# ---- build llama.cpp beside the project -------------------------------------------------------
if [[ ! -x $LLAMA_BENCH ]]; then
  [[ -n $SRC ]] || { echo "llama-bench not built in $BUILD: pass --llama-cpp SRC" >&2; exit 2; }
  if [[ ! -f $SRC/CMakeLists.txt ]]; then
    # A bare git copy: export the folders the build needs (some doc blobs may be absent).
    [[ $(git -C "$SRC" rev-parse --is-bare-repository 2>/dev/null) == true ]] ||
      { echo "$SRC is neither a llama.cpp source tree nor a bare git copy" >&2; exit 2; }
    tree=$BUILD/../llama.cpp-src
    mkdir -p "$tree"
    for p in CMakeLists.txt cmake common ggml include src tools examples vendor pocs app licenses LICENSE; do
      git -C "$SRC" archive HEAD "$p" 2>/dev/null | tar -x -C "$tree" || true
    done
    SRC=$(cd "$tree" && pwd)
  fi
  cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_OPENSSL=OFF >/dev/null
  cmake --build "$BUILD" -j"$JOBS" --target llama-bench
fi
# A ggml-cpu for one ISA beside the build: <build>-$1 (unless built already), the rest of $@ its
# ISA flags; prints the folder that holds the library.
ggml_cpu_for() {
  local dir=$BUILD-$1
  shift
  if [[ ! -f $dir/bin/libggml-cpu.so ]]; then
    local src
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt")
    cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
      -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON "$@" -DLLAMA_CURL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF \
      -DLLAMA_OPENSSL=OFF >/dev/null || return 1
    cmake --build "$dir" -j"$JOBS" --target ggml-cpu >&2 || return 1
  fi
  echo "$dir/bin"
}
if [[ $NO_AMX == 1 && -z $GGML_CPU ]]; then
  GGML_CPU=$(ggml_cpu_for noamx -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON)
fi
if [[ $NO_BF16 == 1 ]]; then
  export DFL_AVX512_BF16=0
  [[ -n $GGML_CPU ]] ||
    GGML_CPU=$(ggml_cpu_for nobf16 -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=OFF)
fi
if [[ $SKYLAKE == 1 ]]; then
  export DFL_AVX512_VNNI=0 DFL_AVX512_BF16=0 DFL_AVX_VNNI=0
  [[ -n $GGML_CPU ]] || GGML_CPU=$(ggml_cpu_for skylake -DGGML_AVX512=ON -DGGML_AVX512_VBMI=OFF \
    -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF)
fi
if [[ $AVX2 == 1 ]]; then
  export DFL_ISA=avx2 DFL_AVX_VNNI=0
  [[ -n $GGML_CPU ]] || GGML_CPU=$(ggml_cpu_for avx2 -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF)
fi
if [[ $AVX_VNNI == 1 ]]; then
  export DFL_ISA=avx2
  [[ -n $GGML_CPU ]] || GGML_CPU=$(ggml_cpu_for avxvnni -DGGML_AVX512=OFF -DGGML_AVX_VNNI=ON)
fi
[[ -n $GGML_CPU ]] && export LD_LIBRARY_PATH=$GGML_CPU${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[[ -x $DFLASH ]] || { echo "build dflash first: cmake --build build ($DFLASH missing)" >&2; exit 2; }
mkdir -p "$OUT"

# ---- inputs -----------------------------------------------------------------------------------
# The GGUF writer needs PyPI `gguf` (llama.cpp's gguf-py): a small venv outside the repo unless
# PYTHON names an interpreter that has it.
if [[ -z $PY ]]; then
  if python3 -c 'import gguf, numpy' 2>/dev/null; then PY=python3; else
    venv=$CACHE/venv-bench-gguf
    if ! "$venv/bin/python" -c 'import gguf, numpy' 2>/dev/null; then
      echo "vs_llamacpp.sh: creating $venv (PyPI gguf, numpy)" >&2
      python3 -m venv "$venv"
      "$venv/bin/python" -m pip install --quiet --disable-pip-version-check gguf==0.19.0 numpy >&2
    fi
    PY=$venv/bin/python
  fi
fi
GEMMA=$CACHE/gemma-3-270m-q4_k_m.gguf
Q3=$BENCH_MODELS/qwen3-0.6b
need_qwen3_gguf() {  # $1 = bf16 | q8_0 | f16
  local f=$BENCH_MODELS/gguf/qwen3-0.6b-$1.gguf
  if [[ ! -f $f ]]; then
    [[ -f $Q3/model.safetensors ]] || { echo "missing $Q3: run tools/ref/make_bench_models.py --only 0.6b" >&2; exit 2; }
    mkdir -p "$BENCH_MODELS/gguf"
    "$PY" "$REPO/tools/bench/write_bench_gguf.py" "$Q3" "$f" --type "$1" >&2
  fi
  echo "$f"
}

# ---- one round of each side -------------------------------------------------------------------
ours() {  # $1 = tag, $2 = model, rest = extra flags
  local tag=$1 model=$2; shift 2
  "$DFLASH" bench --model "$model" --threads "$THREADS" --repeats 1 --pp 16,512 --tg 64 \
    --verify 1,16 --skip machine,draft,dflash --json "$@" 2>"$OUT/$tag.ours.$r.err" \
    >"$OUT/$tag.ours.$r.json" || echo "dflash bench failed: $OUT/$tag.ours.$r.err" >&2
}
theirs() {  # $1 = tag, $2 = gguf
  "$LLAMA_BENCH" -m "$2" -t "$THREADS" -p 16,512 -n 64 -r 1 -o json 2>"$OUT/$1.theirs.$r.err" \
    >"$OUT/$1.theirs.$r.json" || echo "llama-bench failed: $OUT/$1.theirs.$r.err" >&2
}

run_case() {  # $1 = case name, $2 = gguf, then "tag|model|flags" per our variant
  local name=$1 gguf=$2; shift 2
  for ((r = 1; r <= ROUNDS; r++)); do
    for v in "$@"; do
      IFS='|' read -r tag model flags <<<"$v"
      # shellcheck disable=SC2086
      ours "$name.$tag" "$model" $flags
      theirs "$name.$tag" "$gguf"  # alternate: every ours run is followed by a llama.cpp run
    done
  done
}

# Our GGUF variants ("tag|model|flags"), one per --ggml-act mode.
IFS=',' read -ra acts <<<"$GGML_ACTS"
for a in "${acts[@]}"; do
  [[ $a == int8x2 || $a == int8 || $a == fp32 ]] || { echo "--ggml-act: int8x2, int8 or fp32, got '$a'" >&2; exit 2; }
done
gguf_variants() {  # $1 = the GGUF file
  for a in "${acts[@]}"; do
    if [[ $a == int8x2 ]]; then echo "gguf|$1|--ggml-act int8x2"; else echo "gguf-$a|$1|--ggml-act $a"; fi
  done
}

IFS=',' read -ra want <<<"$CASES"
for c in "${want[@]}"; do
  case "$c" in
    gemma)
      [[ -f $GEMMA ]] || { echo "missing $GEMMA: run tools/models/gemma3_270m.sh" >&2; exit 2; }
      mapfile -t gv < <(gguf_variants "$GEMMA")
      run_case gemma "$GEMMA" "${gv[@]}" ;;
    qwen3-bf16)
      f=$(need_qwen3_gguf bf16)
      run_case qwen3-bf16 "$f" "gguf|$f|" "hf|$Q3|--weights bf16" ;;
    qwen3-q8)
      f=$(need_qwen3_gguf q8_0)
      mapfile -t gv < <(gguf_variants "$f")
      run_case qwen3-q8 "$f" "${gv[@]}" "hf|$Q3|--weights q8" ;;
    qwen3-f16)
      f=$(need_qwen3_gguf f16)
      run_case qwen3-f16 "$f" "gguf|$f|" ;;
    qwen3-q4km)
      f=$BENCH_MODELS/gguf/qwen3-0.6b-q4_k_m.gguf
      if [[ ! -f $f ]]; then
        [[ -x $LLAMA_QUANTIZE ]] || cmake --build "$BUILD" -j"$JOBS" --target llama-quantize >&2
        "$LLAMA_QUANTIZE" "$(need_qwen3_gguf f16)" "$f" Q4_K_M "$THREADS" >&2
      fi
      mapfile -t gv < <(gguf_variants "$f")
      run_case qwen3-q4km "$f" "${gv[@]}" ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
done

# ---- table ------------------------------------------------------------------------------------
"$PY" - "$OUT" "$THREADS" <<'PYEOF'
import glob, json, os, statistics, sys
out, threads = sys.argv[1], sys.argv[2]
tags = sorted({os.path.basename(p).split(".ours.")[0] for p in glob.glob(f"{out}/*.ours.*.json")})
def load(p):
    try:
        with open(p) as f: return json.load(f)
    except Exception: return None
def rng(v):
    v = [x for x in v if x]
    if not v: return None, "—"
    return statistics.median(v), (f"{min(v):.1f}–{max(v):.1f}" if len(v) > 1 else f"{v[0]:.1f}")
cpu = load_avg = ""
print(f"| case · ours on | tg64 ours / llama.cpp | ratio | pp16 ours / llama.cpp | ratio | pp512 ours / llama.cpp | ratio | t(16)/t(1) |")
print("|---|---|---|---|---|---|---|---|")
for tag in tags:
    ours = [load(p) for p in sorted(glob.glob(f"{out}/{tag}.ours.*.json"))]
    theirs = [load(p) for p in sorted(glob.glob(f"{out}/{tag}.theirs.*.json"))]
    ours = [o for o in ours if o]; theirs = [t for t in theirs if t]
    if ours: cpu, load_avg = ours[0].get("cpu", ""), ours[-1].get("loadavg_end", "")
    cells = []
    for key in ("tg64", "pp16", "pp512"):
        if key == "tg64":
            o = [x.get("decode_tok_s") for x in ours]
            t = [e["avg_ts"] for x in theirs for e in x if e.get("n_gen") == 64 and e.get("n_prompt") == 0]
        else:
            n = key[2:]
            o = [x.get("prefill_tok_s", {}).get(n) for x in ours]
            t = [e["avg_ts"] for x in theirs for e in x if e.get("n_prompt") == int(n) and e.get("n_gen") == 0]
        mo, so = rng(o); mt, st = rng(t)
        cells.append(f"{so} / {st}")
        cells.append(f"**{mo / mt:.2f}**" if mo and mt else "—")
    v = [x.get("verify_cost", {}).get("16") for x in ours]
    mv, sv = rng(v)
    cells.append(f"{mv:.2f}" if mv else "—")
    print(f"| {tag} | " + " | ".join(cells) + " |")
print(f"\n{cpu}, {threads} threads, medians of the rounds (ranges shown), load avg at the end {load_avg}; "
      f"llama.cpp CPU backend: {os.environ.get('LD_LIBRARY_PATH') or 'its build'}; raw runs in {out}")
PYEOF
