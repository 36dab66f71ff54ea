#!/bin/bash
# Runs one ranktime-synth job under mpirun with a timeline, then checks what it left behind.
#
#   synth_timeline.sh MODE NP TRACE SYNTH CHECKER SKEW_EXEC
#       --mpirun MPIRUN FLAGS... [--env VAR=VALUE]... [--skew s0,s1,...] [--stderr-has TEXT]
#       --synth SYNTH_ARGS... [--check CHECK_ARGS...]
#
# MODE
#   check       run the job to completion (exit 0, results verified), then
#               tl-check-trace TRACE --ranks NP CHECK_ARGS
#   sigterm     start a long job, wait until TRACE holds flushed events, send SIGTERM to mpirun
#               (Open MPI sends SIGCONT to the ranks, then SIGTERM, then SIGKILL); the job must
#               end within 20 s, and TRACE must pass tl-check-trace
#   unwritable  TRACE cannot be written (missing directory, /dev/full): the job must still finish
#               with verified results, and stderr must name TRACE
#   refused     a setting is refused at start-up: the job must fail, stderr must hold TEXT, and
#               TRACE must not exist
set -uo pipefail

mode=$1 np=$2 trace=$3 synth=$4 checker=$5 skew_exec=$6
shift 6
mpirun=() envs=() synth_args=() check_args=() skew="" stderr_has=""
section=""
while [ $# -gt 0 ]; do
  case "$1" in
    --mpirun) section=mpirun ;;
    --synth) section=synth ;;
    --check) section=check ;;
    --env) envs+=(-x "$2"); shift ;;
    --skew) skew=$2; shift ;;
    --stderr-has) stderr_has=$2; shift ;;
    *)
      case "$section" in
        mpirun) mpirun+=("$1") ;;
        synth) synth_args+=("$1") ;;
        check) check_args+=("$1") ;;
        *) echo "synth_timeline.sh: unexpected argument '$1'" >&2; exit 2 ;;
      esac ;;
  esac
  shift
done

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

launch=("${mpirun[@]}" -np "$np" -x "TIMELINE_FILENAME=$trace" "${envs[@]}")
if [ -n "$skew" ]; then
  launch+=("$skew_exec" "$skew" "$synth")
else
  launch+=("$synth")
fi
launch+=("${synth_args[@]}")

work=$(mktemp -d "${TMPDIR:-/tmp}/tl-synth.XXXXXX")
trap 'rm -rf "$work"' EXIT

case "$mode" in
  check)
    case "$trace" in /dev/*) ;; *) rm -f "$trace" ;; esac
    echo "+ ${launch[*]}" >&2
    "${launch[@]}" >"$work/out" 2>"$work/err"
    rc=$?
    cat "$work/out"
    cat "$work/err" >&2
    [ $rc -eq 0 ] || fail "mpirun exited with $rc"
    grep -q "verify=ok" "$work/out" || fail "ranktime-synth did not report verified results"
    "$checker" "$trace" --ranks "$np" "${check_args[@]}" || fail "tl-check-trace found problems in $trace"
    ;;

  sigterm)
    rm -f "$trace"
    echo "+ ${launch[*]} &" >&2
    "${launch[@]}" >"$work/out" 2>"$work/err" &
    job=$!
    # Wait for the first flush (the writer flushes at least every 250 ms) and a little history.
    for _ in $(seq 200); do
      size=$(stat -c %s "$trace" 2>/dev/null || echo 0)
      [ "$size" -gt 20000 ] && break
      kill -0 $job 2>/dev/null || break
      sleep 0.05
    done
    kill -0 $job 2>/dev/null || { cat "$work/err" >&2; fail "the job ended before it could be signalled"; }
    [ "$size" -gt 20000 ] || { kill -KILL $job; fail "no timeline data in $trace after 10 s"; }
    echo "+ kill -TERM $job (mpirun) with $size bytes in $trace" >&2
    kill -TERM $job
    # Open MPI gives the ranks odls_base_sigkill_timeout (1 s) between SIGCONT and SIGTERM, and
    # again before SIGKILL: 20 s is a hang.
    for _ in $(seq 400); do
      kill -0 $job 2>/dev/null || break
      sleep 0.05
    done
    if kill -0 $job 2>/dev/null; then
      kill -KILL $job
      fail "the job was still running 20 s after SIGTERM"
    fi
    wait $job
    echo "mpirun exited with $? after SIGTERM; $(stat -c %s "$trace") bytes in $trace" >&2
    "$checker" "$trace" --ranks "$np" --allow-drops "${check_args[@]}" ||
      fail "after SIGTERM, $trace is not a valid complete timeline"
    ;;

  unwritable)
    case "$trace" in
      /dev/*) ;;
      *) [ -e "$(dirname "$trace")" ] && fail "test setup: $(dirname "$trace") must not exist" ;;
    esac
    echo "+ ${launch[*]}" >&2
    "${launch[@]}" >"$work/out" 2>"$work/err"
    rc=$?
    cat "$work/out"
    cat "$work/err" >&2
    [ $rc -eq 0 ] || fail "mpirun exited with $rc: the job must finish without its timeline"
    grep -q "verify=ok" "$work/out" || fail "ranktime-synth did not report verified results"
    lines=$(grep -cF -- "$trace" "$work/err")
    [ "$lines" -ge 1 ] || fail "no message on stderr names $trace"
    # One clear message, not one per flush or per rank.
    [ "$lines" -le 3 ] || fail "$lines lines on stderr name $trace"
    ;;

  refused)
    rm -f "$trace"
    echo "+ ${launch[*]}" >&2
    timeout 60 "${launch[@]}" >"$work/out" 2>"$work/err"
    rc=$?
    cat "$work/err" >&2
    [ $rc -ne 0 ] || fail "the job succeeded; expected a start-up error"
    [ $rc -ne 124 ] || fail "the job hung instead of refusing the setting"
    grep -qF -- "$stderr_has" "$work/err" || fail "stderr does not say: $stderr_has"
    [ ! -e "$trace" ] || fail "$trace was written"
    ;;

  *)
    fail "unknown mode '$mode'"
    ;;
esac
echo "PASS" >&2
