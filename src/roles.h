/*-------------------------------------------------------------------------
 *
 * roles.h
 *	  Role bindings by name (roles.c), and how each version's SQL records
 *	  and checks the holder of a key or an outbox lease.
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_ROLES_H
#define IDEM_ROLES_H

/*
 * How the holder of a key is recorded and checked (keys.c, "Holders"), and
 * likewise the role of an outbox lease, by the SQL of each version.
 */
typedef enum IdemHolders
{
	IDEM_HOLDERS_NONE,			/* before 1.7: not recorded, not checked */
	IDEM_HOLDERS_BY_OID,		/* 1.7: holder_role, an OID */
	IDEM_HOLDERS_BY_NAME		/* 1.8: and holder_role_name, the binding
								 * checked (roles.c) */
} IdemHolders;

/*
 * Role bindings by name (1.8).  IDEM_BINDING_ALLOWS is the SQL of
 * idem_binding_allows() on the columns "oidcol" (the regrole) and "namecol"
 * (the name), with $oid the calling role's OID, $name its name and $priv
 * idem_role_privileged() of it (parameter numbers).
 */
#define IDEM_BINDING_ALLOWS(oidcol, namecol, oid, name, priv) \
	"((" oidcol " IS NULL AND " namecol " IS NULL)" \
	" OR " namecol " OPERATOR(pg_catalog.=) $" #name \
	" OR $" #priv \
	" OR EXISTS (SELECT FROM pg_catalog.pg_roles r" \
	"  WHERE r.rolname OPERATOR(pg_catalog.=) " namecol \
	"  AND pg_catalog.pg_has_role($" #oid ", r.oid, 'MEMBER')))"

extern Datum idem_role_name(Oid role);
extern bool idem_role_privileged(Oid role);
extern bool idem_role_exists(const char *name);
extern bool idem_binding_allows(Oid caller, bool oid_set, const char *name);

#endif							/* IDEM_ROLES_H */
