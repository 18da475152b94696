/*-------------------------------------------------------------------------
 *
 * roles.c
 *	  Role bindings by name: whether the calling role may act on a
 *	  key held by, or an event leased by, the role a row names.
 *
 * A claim records its role as the key's holder (holder_role) and
 * claim_events the relay's (lease_role), as regrole: an OID.  An OID names
 * another role, or none, on a server whose roles were created in another
 * order: after pg_dump and pg_restore of a row whose role was dropped (a
 * dropped role's regrole dumps as its bare number), and on a logical
 * subscriber with binary = true, which applies the publisher's OIDs.  So
 * the rows also record the role's name (holder_role_name,
 * lease_role_name), which pg_dump, pg_dumpall --roles-only and every
 * subscription carry as they are, and only the name is trusted.
 *
 * A binding allows:
 * - every role, when neither the OID nor the name is recorded (a row written
 *   by a symbol of 1.6 or older);
 * - the role of that name and its members (is_member_of_role(): the
 *   privileges of the holder, SET ROLE to it included);
 * - the owner of the extension's tables and its members, and superusers,
 *   whatever the row names: they may write the tables anyway, and they
 *   are the ones to release a key whose role is gone.
 * A row with an OID but no name (its role was dropped before the update
 * to 1.8 could name it, or it came from a server still at 1.7) allows the
 * owner and superusers only: its holder is not known by name, so the
 * binding fails closed.  So does a name that matches no role here.
 *
 * The statements that check a binding state the same rule in SQL
 * (IDEM_BINDING_ALLOWS in roles.h), so that it is a clause of the
 * UPDATE or DELETE that acts.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"

#include "idempotency.h"
#include "bookkeeping.h"
#include "roles.h"

/*
 * The name of role "role", as a Datum of type name (palloc'd).
 */
Datum
idem_role_name(Oid role)
{
	return DirectFunctionCall1(namein,
							   CStringGetDatum(GetUserNameFromId(role, false)));
}

/*
 * Whether "role" may act on every binding: a superuser, or a member of the
 * owner of the extension's tables.
 */
bool
idem_role_privileged(Oid role)
{
	return superuser_arg(role) || is_member_of_role(role, idem_extension_owner());
}

/*
 * Whether the role named "name" exists here.
 */
bool
idem_role_exists(const char *name)
{
	return OidIsValid(get_role_oid(name, true));
}

/*
 * Whether role "caller" may act on a row whose binding records an OID
 * ("oid_set") and the role name "name" (NULL: none recorded), by the rule
 * above.
 */
bool
idem_binding_allows(Oid caller, bool oid_set, const char *name)
{
	Oid			bound;

	if (name == NULL)
		return !oid_set || idem_role_privileged(caller);
	if (strcmp(name, GetUserNameFromId(caller, false)) == 0)
		return true;
	bound = get_role_oid(name, true);
	if (OidIsValid(bound) && is_member_of_role(caller, bound))
		return true;
	return idem_role_privileged(caller);
}
