#!/bin/sh
# test_train.sh -- flx-train learns the synthetic task with every policy on
# 1 and 3 ranks: the final test accuracy and the last epoch's training loss
# are asserted, and --check-sync fails the run unless every rank holds
# bit-identical weights after every synchronised step.  Also the CNN, and
# errors for bad options and corrupt data.
set -u
top=${abs_top_builddir:-.}
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# train N POLICY ARGS...: runs, checks accuracy >= 85% and loss < 0.6
train() {
    n=$1 pol=$2
    shift 2
    out=$("$top/flxrun" -n "$n" --timeout 300 "$top/flx-train" --synthetic --epochs 3 \
          --model mlp:64 --batch 32 --seed 3 --policy "$pol" --check-sync \
          --log "$tmp/$pol-$n.csv" "$@" 2>&1) || fail "flx-train --policy $pol on $n ranks: $out"
    acc=$(echo "$out" | sed -n 's/.*final test-acc \([0-9.]*\)%.*/\1/p' | tail -1)
    loss=$(echo "$out" | sed -n 's/.*epoch 3\/3  loss \([0-9.]*\) .*/\1/p' | tail -1)
    [ -n "$acc" ] && [ -n "$loss" ] || fail "no accuracy or loss in: $out"
    awk -v a="$acc" -v l="$loss" 'BEGIN { exit !(a >= 85.0 && l < 0.6) }' ||
        fail "--policy $pol on $n ranks: test accuracy $acc%, loss $loss (need >= 85%, < 0.6): $out"
    rows=$(grep -c ",$pol," "$tmp/$pol-$n.csv")
    [ "$rows" -ge 100 ] || fail "--policy $pol on $n ranks: $rows rows in the step log"
    echo "policy $pol, $n rank(s): test accuracy $acc%, loss $loss"
}

for pol in dense topk-ag artopk powersgd accordion gravac selsync flex; do
    for n in 1 3; do
        train "$n" "$pol" --interval 20
    done
done
# flex actually compresses when the weight asks for speed at any price
train 3 flex --weight 1 --interval 20
grep -q ",flex,artopk,\|,flex,topk-ag," "$tmp/flex-3.csv" || fail "flex --weight 1 never compressed"
# AR-Topk with the index set voted by every rank
train 3 artopk --leader vote
# top-k with momentum correction: each rank's velocity compressed, masked where sent;
# it must change the run (same seed, same data: without it the runs are identical)
mc_on=$(train 3 topk-ag --momentum-correction on) || { echo "$mc_on"; exit 1; }
echo "$mc_on"
mc_off=$(train 3 topk-ag --momentum-correction off) || { echo "$mc_off"; exit 1; }
[ "${mc_on#*accuracy}" != "${mc_off#*accuracy}" ] ||
    fail "--momentum-correction on changed nothing: $mc_on / $mc_off"
train 3 flex --weight 1 --interval 20 --momentum-correction on
out=$("$top/flx-train" --synthetic --epochs 1 --max-steps 5 --model mlp:16 --policy topk-ag \
      --momentum-correction on 2>&1) || fail "momentum correction, 1 rank: $out"
echo "$out" | grep -q "policy topk-ag with momentum correction" || fail "no momentum correction line: $out"
# selsync skipped some steps and synced others
grep -q ",selsync,skip," "$tmp/selsync-3.csv" || fail "selsync never skipped a step"
# the CNN on 4000 Fashion-MNIST images (the synthetic task has no image structure)
out=$("$top/flxrun" -n 2 --timeout 300 "$top/flx-train" --train-limit 4000 --epochs 2 \
      --model cnn:8,16,64 --batch 32 --seed 3 --check-sync 2>&1) || fail "CNN: $out"
acc=$(echo "$out" | sed -n 's/.*final test-acc \([0-9.]*\)%.*/\1/p')
awk -v a="$acc" 'BEGIN { exit !(a >= 70.0) }' || fail "CNN test accuracy $acc% < 70%: $out"
echo "CNN on Fashion-MNIST, 2 ranks: test accuracy $acc%"

# --time-limit: the ranks agree when to stop (their clocks differ), evaluate, exit 0
out=$("$top/flxrun" -n 3 --timeout 120 "$top/flx-train" --synthetic --epochs 50 --model mlp:64 \
      --batch 32 --time-limit 0.3 --policy flex 2>&1) || fail "--time-limit run: $out"
echo "$out" | grep -q "final test-acc" || fail "--time-limit: no final line: $out"
echo "$out" | grep -q "epoch 50/50" && fail "--time-limit did not stop the run: $out"

# bad input: one clear line, exit status != 0
out=$("$top/flx-train" --synthetic --train-limit 10 --batch 64 2>&1) && fail "10 examples for a 64-example step accepted"
echo "$out" | grep -q "fewer than one step" || fail "no clear error for too little data: $out"
"$top/flx-train" --policy fastest >/dev/null 2>&1 && fail "unknown policy accepted"
out=$("$top/flx-train" --synthetic --policy dense --momentum-correction on 2>&1) &&
    fail "momentum correction without top-k accepted"
echo "$out" | grep -q "needs a top-k policy" || fail "no clear error for dense + momentum correction: $out"
"$top/flx-train" --synthetic --momentum-correction maybe >/dev/null 2>&1 &&
    fail "--momentum-correction maybe accepted"
out=$("$top/flx-train" --synthetic --model cnn:4 2>&1) && fail "bad CNN spec accepted"
out=$("$top/flx-train" --synthetic --model mlp:0 2>&1) && fail "zero-width layer accepted"
mkdir "$tmp/data"
printf 'not gzip and not IDX' > "$tmp/data/train-images-idx3-ubyte"
out=$("$top/flx-train" --data "$tmp/data" 2>&1) && fail "corrupt data accepted"
echo "$out" | grep -q "$tmp/data/train-images-idx3-ubyte" || fail "error does not name the file: $out"
echo "PASS: flx-train, every policy on 1 and 3 ranks"
