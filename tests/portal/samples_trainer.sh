#!/bin/sh
# A scripted stand-in for llamafleet-train on the portal test's second worker (run.sh):
# 30 steps of 0.05 s; metrics with DPO rewards every step; at steps 10, 20 and 30 an eval
# line and three "sample" lines (eval.samples) whose texts change with the step; index 2's
# text is markup that the page must show as text. Arguments are ignored.
echo '{"type":"event","event":"started","total_steps":30}'
step=0
while [ $step -lt 30 ]; do
  sleep 0.05
  step=$((step + 1))
  awk -v s=$step 'BEGIN { printf "{\"type\":\"metrics\",\"step\":%d,\"loss\":%g,\"lr\":0.001,\"tokens_per_s\":1000,\"rewards_chosen\":%g,\"rewards_rejected\":%g,\"rewards_accuracies\":%g,\"rewards_margins\":%g}\n", s, 3 - s / 20, s / 20, -s / 40, s / 40, s * 3 / 40 }'
  if [ $((step % 10)) = 0 ]; then
    echo "{\"type\":\"eval\",\"step\":$step,\"loss\":2.5,\"perplexity\":12.18,\"tokens\":256}"
    echo "{\"type\":\"sample\",\"step\":$step,\"index\":0,\"prompt\":\"What is 2+2?\",\"text\":\"At step $step: four\",\"tokens\":5,\"stop_reason\":\"eos\",\"reference\":\"four\",\"scores\":{\"contains\":1,\"exact_match\":0}}"
    echo "{\"type\":\"sample\",\"step\":$step,\"index\":1,\"prompt\":\"Name a colour.\",\"text\":\"Step $step says blue\",\"tokens\":4,\"stop_reason\":\"length\"}"
    echo "{\"type\":\"sample\",\"step\":$step,\"index\":2,\"prompt\":\"Write HTML.\",\"text\":\"<b id=injected>step $step</b>\",\"tokens\":7,\"stop_reason\":\"stop\"}"
  fi
done
exit 0
