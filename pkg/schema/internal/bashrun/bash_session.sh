__ci_f=$1 __ci_c=$2
shift 2
__ci_base=" $(compgen -v | tr '\n' ' ') "
. "$__ci_f" >/dev/null 2>&1
__ci_dump() {
  __ci_rc=$?
  trap - EXIT
  {
    printf 'cd -- %q\n' "$PWD"
    export -p
    for __ci_n in $(compgen -v); do
      case "$__ci_base" in *" $__ci_n "*) continue ;; esac
      case "$__ci_n" in __ci_*) continue ;; esac
      declare -p "$__ci_n" 2>/dev/null
    done
    for __ci_n in $(compgen -A function); do
      [ "$__ci_n" = __ci_dump ] || declare -f "$__ci_n"
    done
  } >"$__ci_f" 2>/dev/null
  exit "$__ci_rc"
}
trap __ci_dump EXIT
eval "$__ci_c"
