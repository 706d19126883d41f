#!/bin/bash
cd /work/wt/deploy14
PY=/work/main/.venv/bin/python
export PYTHONPATH=.
for f in shared:../shared/data/validation/sglang_deepseek_b200_b300.csv deployed:validation/sglang_deepseek_b200_b300_deployed.csv ix:validation/sglang_deepseek_inferencex.csv; do
  name=${f%%:*}; path=${f#*:}
  start=$(date +%s)
  nice -n 10 $PY -m shadowsim validate $path --json --quiet > runs/v_$name.json 2> runs/v_$name.err
  echo "$name rc=$? $(( $(date +%s) - start ))s" >> runs/progress.log
done
echo all-done >> runs/progress.log
