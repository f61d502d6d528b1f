#!/bin/sh
# The daily merge of the Docker stack (docker-compose.yml, service merge-daily): a scheduler
# loop rather than cron, so it runs as the image's unprivileged user, logs to the container's
# output and needs nothing installed.
#
# Every day at MERGE_AT (HH:MM, UTC) it merges yesterday (UTC) for every table mirrored to Hive:
#   cdc-mirror merge --all --dt <yesterday> --wait-ready-s MERGE_WAIT_READY_S
# The merge waits (bounded) for the stream writer to declare the day ready. A failed merge
# (exit 5: a table failed; 4: a check found a mismatch; other codes: `cdc-mirror --help`) is
# retried MERGE_RETRIES times in all, MERGE_RETRY_S apart; after that the day is left for the
# operator (docs/operations.md) and the loop goes on with the next day.
#
#   merge-daily                 the loop
#   merge-daily --once [DAY]    one merge (with its retries) of DAY (default yesterday), then
#                               exit with the merge's status
set -eu

MERGE_AT="${MERGE_AT:-02:00}"
MERGE_WAIT_READY_S="${MERGE_WAIT_READY_S:-3600}"
MERGE_RETRIES="${MERGE_RETRIES:-3}"
MERGE_RETRY_S="${MERGE_RETRY_S:-1800}"

log() {
    echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) merge-daily: $*"
}

case "$MERGE_AT" in
    [01][0-9]:[0-5][0-9] | 2[0-3]:[0-5][0-9]) ;;
    *) log "MERGE_AT must be HH:MM in UTC (e.g. 02:00), not '$MERGE_AT'"; exit 2 ;;
esac
for value in "$MERGE_WAIT_READY_S" "$MERGE_RETRIES" "$MERGE_RETRY_S"; do
    case "$value" in
        '' | *[!0-9]*) log "MERGE_WAIT_READY_S, MERGE_RETRIES and MERGE_RETRY_S must be whole numbers, not '$value'"; exit 2 ;;
    esac
done

# Merge one day with retries; returns the last attempt's exit status.
merge_day() {
    attempt=1
    while :; do
        status=0
        cdc-mirror merge --all --dt "$1" --wait-ready-s "$MERGE_WAIT_READY_S" || status=$?
        if [ "$status" -eq 0 ]; then
            log "merged $1"
            return 0
        fi
        if [ "$attempt" -ge "$MERGE_RETRIES" ]; then
            log "merge of $1 failed (exit $status) $attempt times; left for the operator: cdc-mirror merge --all --dt $1"
            return "$status"
        fi
        log "merge of $1 failed (exit $status); attempt $((attempt + 1)) of $MERGE_RETRIES in ${MERGE_RETRY_S}s"
        attempt=$((attempt + 1))
        sleep "$MERGE_RETRY_S"
    done
}

if [ "${1:-}" = "--once" ]; then
    merge_day "${2:-$(date -u -d yesterday +%Y-%m-%d)}"
    exit $?
fi

while :; do
    now=$(date -u +%s)
    next=$(date -u -d "today $MERGE_AT" +%s)
    if [ "$next" -le "$now" ]; then
        next=$(date -u -d "tomorrow $MERGE_AT" +%s)
    fi
    log "next merge at $(date -u -d "@$next" +%Y-%m-%dT%H:%M:%SZ)"
    sleep $((next - now))
    merge_day "$(date -u -d yesterday +%Y-%m-%d)" || true
done
