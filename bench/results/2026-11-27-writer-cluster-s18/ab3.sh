#!/bin/bash
# usage: ab2.sh tag "bench args" variant...  A = HEAD (python + jar), B = working tree (python + jar)
tag=$1; args=$2; shift 2
for v in "$@"; do
  case $v in
    A) home=/tmp/wc/homeA; dir=/tmp/wc/headA;;
    B) home=/tmp/wc/homeB; dir=/work/main;;
  esac
  cd $dir
  echo "== $v start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/wc/$tag.log
  JAVA_TOOL_OPTIONS="-XX:StartFlightRecording=filename=/tmp/wc/jfr/$tag-$v.jfr,settings=profile,dumponexit=true" PYTHONUNBUFFERED=1 CDC_MIRROR_STACK__HOME=$home /work/main/.venv/bin/python -m bench.stream_writer_bench $args --json /tmp/wc/$tag-$v.json > >(while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done > /tmp/wc/$tag-$v.txt) 2>&1 &
  bp=$!
  python3 /tmp/wc/cpusample.py $bp /tmp/wc/$tag-$v.cpu &
  wait $bp
  echo "== $v end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/wc/$tag.log
  sleep 2
done
