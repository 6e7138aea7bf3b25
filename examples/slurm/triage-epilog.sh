#!/bin/bash
# Train Triage as a Slurm EpilogSlurmctld: when a job fails, diagnose its output files and post the answer to
# Slack (`triage notify`), one thread per job, with the same feedback buttons as /diagnose.
#
#   slurm.conf:   EpilogSlurmctld=/opt/train-triage/examples/slurm/triage-epilog.sh
#   env file:     /etc/train-triage/env   (TRIAGE_NOTIFY_CHANNEL=C…, SLACK_BOT_TOKEN=xoxb-…, TRIAGE_DB=…)
#
# slurmctld runs it as SlurmctldUser after every job, with no search path and a time limit, so: successful jobs
# leave at once, the diagnosis runs in the background (TRIAGE_EPILOG_WAIT=1 runs it in the foreground), and the
# script always exits 0 — an epilog's failure must never hold up the controller. SlurmctldUser must be able to read
# the job's output files (a shared file system such as FSx for Lustre mounted on the controller).
set -u
PATH="${PATH:-}:/usr/local/bin:/usr/bin:/bin"
ENV_FILE="${TRIAGE_ENV_FILE:-/etc/train-triage/env}"
# shellcheck disable=SC1090
[ -r "$ENV_FILE" ] && set -a && . "$ENV_FILE" && set +a
TRIAGE="${TRIAGE:-/opt/train-triage/.venv/bin/triage}"
CHANNEL="${TRIAGE_NOTIFY_CHANNEL:-}"
JOB="${SLURM_JOB_ID:-}"
[ -n "$CHANNEL" ] && [ -n "$JOB" ] || exit 0

# The batch script's exit: "exit:signal" in SLURM_JOB_EXIT_CODE2, else the wait() status in SLURM_JOB_EXIT_CODE.
# Killed by a signal counts as 128 + the signal, as a shell reports it.
if [ -n "${SLURM_JOB_EXIT_CODE2:-}" ]; then
  code="${SLURM_JOB_EXIT_CODE2%%:*}"; sig="${SLURM_JOB_EXIT_CODE2##*:}"
elif [ -n "${SLURM_JOB_EXIT_CODE:-}" ]; then
  code=$(( (SLURM_JOB_EXIT_CODE >> 8) & 255 )); sig=$(( SLURM_JOB_EXIT_CODE & 127 ))
else
  exit 0
fi
case "$code$sig" in *[!0-9]*|"") exit 0 ;; esac
[ "$sig" -ne 0 ] && code=$(( 128 + sig ))
[ "$code" -eq 0 ] && exit 0

# The job's output files as scontrol shows them (%j and friends already expanded): only the real StdOut=/StdErr=
# fields, each at the start of its own line (a user-set Comment= or JobName that holds "StdOut=/some/file" is not
# one), only regular files owned by the job's own user (never another user's file the controller can read), never
# through a symbolic link; /dev/null and missing ones out.
info=$(scontrol show job "$JOB" 2>/dev/null)
owner=$(printf '%s\n' "$info" | grep -oE '(^|[[:space:]])UserId=[^([:space:]]+' | head -n1 | cut -d= -f2)
files=()
while IFS= read -r f; do
  [ -f "$f" ] && [ ! -L "$f" ] && [ -r "$f" ] || continue
  [ -n "$owner" ] && [ "$(stat -c %U "$f" 2>/dev/null)" != "$owner" ] && continue
  [[ " ${files[*]-} " != *" $f "* ]] && files+=("$f")
done < <(printf '%s\n' "$info" | sed -nE 's/^[[:space:]]*(StdOut|StdErr)=(.*)$/\2/p')
[ "${#files[@]}" -gt 0 ] || exit 0

LOG="${TRIAGE_EPILOG_LOG:-/dev/null}"
# shellcheck disable=SC2086  # TRIAGE may be a command with arguments
run() { timeout "${TRIAGE_EPILOG_TIMEOUT:-600}" $TRIAGE notify --channel "$CHANNEL" --job "$JOB" \
          --exit-code "$code" "${files[@]}" >>"$LOG" 2>&1; }
if [ "${TRIAGE_EPILOG_WAIT:-0}" = 1 ]; then
  run
else
  run </dev/null &
  disown
fi
exit 0
