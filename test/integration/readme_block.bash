# test/integration/readme_block.bash: sourced by the tests that run a
# README's own text.  readme_block FILE NAME LANG prints the first ```LANG
# block after the line that starts with "<!-- NAME" (the README's marker,
# e.g. <!-- quick-start: express (...) -->), and fails when there is none.
readme_block() {
  local text
  text=$(awk -v name="<!-- $2" -v fence="\`\`\`$3" '
    index($0, name) == 1 { on = 1; next }
    on && $0 == fence { inblock = 1; next }
    inblock && /^```$/ { exit }
    inblock { print }' "$1")
  [ -n "$text" ] || { echo "readme_block: no \`\`\`$3 block after <!-- $2 in $1" >&2; return 1; }
  printf '%s\n' "$text"
}
