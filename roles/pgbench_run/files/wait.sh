# The wait, on a client, for its wrapper's end (its command.json, written last) or its
# going away (killed): $1 the run folder, $2 the wrapper's pid, $3 seconds at most. Run
# as `sh -ec <this> sh <folder> <pid> <seconds>` (role pgbench_run, entry point run).
n=$(( $3 * 5 ))
while [ ! -e "$1/command.json" ] && kill -0 "$2" 2>/dev/null; do
  n=$((n - 1)); [ "$n" -gt 0 ] || { echo "the wrapper still runs after $3 s" >&2; exit 1; }
  sleep 0.2
done
