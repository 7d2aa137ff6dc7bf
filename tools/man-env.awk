# man-env.awk -- `flx-info -c` as a help2man section: every FLX_* variable,
# its default and its help, for flx-info(1).
function roff(s) {
    gsub(/\\/, "\\e", s)
    if (s ~ /^[.']/) s = "\\&" s
    return s
}
BEGIN { print "[ENVIRONMENT]"; print "Every FLX_* variable flexcoll reads (flx-info -c prints them with their values now):" }
/^# ./ { help = help (help == "" ? "" : " ") substr($0, 3); next }
/^FLX_[A-Z0-9_]*=/ {
    name = $0; sub(/=.*/, "", name)
    def = $0; sub(/.*# default: /, "", def)
    print ".TP"; print ".B " name
    print roff(help " (default: " def ")")
    help = ""
}
