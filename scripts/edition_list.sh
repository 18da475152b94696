#!/bin/sh
# scripts/edition_list.sh: the restore list that moves a database from one
# edition of idempotency to another (the C edition, the portable edition
# through pg_tle or as a plain script) by pg_dump -Fc and pg_restore
# (doc/operations.md, "Moving between the C and the portable edition").
#
#   pg_restore -l app.dump | sh scripts/edition_list.sh > app.list
#   pg_restore -L app.list -d app app.dump
#
# It reads `pg_restore -l` and keeps everything of the application, and of
# the extension only its rows (TABLE DATA), its sequences' values
# (SEQUENCE SET) and the grants on it (ACL). It leaves out what defines an
# edition, since the target database has the other edition installed
# before the restore: the extension entries of idempotency and pg_tle, the
# schemas idempotency and pgtle with every object in them (the portable
# edition's helpers, the pg_tle registration functions, pg_tle's own
# rows), the plain script's version table, the portable edition's own
# sequences (portable_*: a session's last notification, no data), and the
# grants on objects that only the portable edition has (portable_*,
# plain_version).
exec awk '
/^;/ || !/^[0-9]+; [0-9]+ [0-9]+ / { print; next }
{
    entry = $0
    sub(/^[0-9]+; [0-9]+ [0-9]+ /, "", entry)
}
entry ~ /^(SCHEMA|EXTENSION) - (idempotency|pgtle|pg_tle) /              { next }
entry ~ /^(COMMENT|ACL) - (SCHEMA|EXTENSION) (pgtle|pg_tle) /            { next }
entry ~ /^COMMENT - (SCHEMA|EXTENSION) idempotency /                      { next }
entry ~ /^ACL - SCHEMA idempotency /                                      { print; next }
entry ~ /^(TABLE DATA|SEQUENCE SET) idempotency / && entry !~ / plain_version / &&
    entry !~ /^SEQUENCE SET idempotency portable_/                         { print; next }
entry ~ /^ACL idempotency / &&
    entry !~ /^ACL idempotency (FUNCTION portable_|SEQUENCE portable_|TABLE plain_version )/ { print; next }
entry ~ /^[A-Z][A-Z ]* (idempotency|pgtle) /                              { next }
{ print }
'
