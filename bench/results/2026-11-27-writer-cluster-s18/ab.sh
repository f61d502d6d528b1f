#!/bin/bash
# usage: ab.sh tag "bench args" variant... (A=main jar nosort, B=new jar+sort, C=new jar nosort, D=main jar+sort)
cd /work/main
tag=$1; args=$2; shift 2
for v in "$@"; do
  case $v in
    A) home=/tmp/wc/homeA; nosort=1;;
    B) home=/tmp/wc/homeB; nosort=;;
    C) home=/tmp/wc/homeB; nosort=1;;
    D) home=/tmp/wc/homeA; nosort=;;
  esac
  echo "== $v start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/wc/$tag.log
  PYTHONUNBUFFERED=1 CDC_WC_NOSORT=$nosort CDC_MIRROR_STACK__HOME=$home .venv/bin/python -m bench.stream_writer_bench $args --json /tmp/wc/$tag-$v.json > >(while IFS= read -r l; do printf '%s %s\n' "$(date +%s.%N)" "$l"; done > /tmp/wc/$tag-$v.txt) 2>&1 &
  bp=$!
  python3 /tmp/wc/cpusample.py $bp /tmp/wc/$tag-$v.cpu &
  wait $bp
  echo "== $v end $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> /tmp/wc/$tag.log
  sleep 2
done
