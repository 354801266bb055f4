# A client's empty run folder: $1 its parent (runs/), $2 the folder. Leftovers of
# earlier runs are removed: an interrupted attempt, or a run this client was cut off
# from. Run as `sh -ec <this> sh <runs> <folder>` (role pgbench_run, entry points
# prepare and arm): no variable is interpolated into it.
if [ -d "$1" ]; then find "$1" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +; fi
mkdir -p -- "$2"
chmod 0700 -- "$2"
