/*-------------------------------------------------------------------------
 *
 * scopes.c
 *	  Scopes as a boundary: a role given scopes by
 *	  idempotency.grant_scopes() may use those scopes only.
 *
 * Table idempotency.scope_grants holds (role, scope, is_prefix) rows,
 * written by the extension owner through grant_scopes() and
 * revoke_scopes().  A role is restricted when it, or a role whose
 * privileges it has (has_privs_of_role(), as pg_has_role(..., 'USAGE'):
 * itself and the roles it inherits from), has rows; it may then use the
 * scopes of all those rows, each equal to a row's scope or, for a row with
 * is_prefix, starting with it.  A role without such rows, and every
 * superuser, is unrestricted.  The SQL of
 * the views (stats, stalled_keys) and the portable edition's helper state
 * the same rule.
 *
 * A row names its role by role_name, which alone is read when the table
 * has it (from 1.8's layout): the OID in role may name another role after a
 * restore or on a logical subscriber (roles.c).  A row whose name matches
 * no role (its role was renamed or dropped) restricts the role its OID
 * names, if any: a restriction that lands on the wrong role only refuses
 * more, where one that lands on no role would let a renamed role out.
 *
 * Every function that takes a scope checks it where it reads the
 * argument (idem_arg_scope()), as the calling role (GetUserId(), before
 * the function switches to the extension owner), before it touches any
 * table: a scope outside the role's raises 42501 whether or not the key
 * exists.
 *
 * The hot paths pay one comparison: the rights of the roles that called
 * are cached per backend, the last one at hand.  The cache is dropped by
 * a relcache invalidation of scope_grants (its statement trigger,
 * idempotency_scope_grants_changed, sends one for every write, and DDL on
 * it sends its own), by a change of role membership or of a role
 * (pg_auth_members, pg_authid: superuser, inheritance), and, while the
 * table is missing (a database not yet updated to 1.7), by any relcache
 * invalidation, so that the update's CREATE TABLE is seen.  It is rebuilt
 * by a scan of the table with a new snapshot, so that it is never older
 * than the last invalidation it received: a change takes effect in the
 * other sessions at their next transaction.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "idempotency.h"
#include "relations.h"
#include "scopes.h"

PG_FUNCTION_INFO_V1(idempotency_scope_grants_changed);

/* One scope a role may use: equal to it, or with is_prefix starting with it. */
typedef struct ScopeEntry
{
	char	   *scope;
	int			len;			/* in bytes */
	bool		is_prefix;
} ScopeEntry;

/* What a role may use; the hash entry, keyed by the role. */
typedef struct ScopeRights
{
	Oid			userid;
	bool		restricted;
	int			nentries;
	ScopeEntry *entries;
} ScopeRights;

static MemoryContext scope_context = NULL;
static HTAB *scope_rights = NULL;	/* NULL: dropped */
static Oid	scope_grants_relid = InvalidOid;	/* of the cache's time */
static ScopeRights *last_rights = NULL;
static bool scope_callbacks_set = false;

static void
drop_scope_cache(void)
{
	/* the memory goes at the next rebuild: a callback may come mid-scan */
	scope_rights = NULL;
	last_rights = NULL;
}

static void
scope_relcache_changed(Datum arg pg_attribute_unused(), Oid relid)
{
	if (!OidIsValid(relid) || relid == scope_grants_relid ||
		!OidIsValid(scope_grants_relid))
		drop_scope_cache();
}

static void
scope_roles_changed(Datum arg pg_attribute_unused(), int cacheid pg_attribute_unused(),
					uint32 hashvalue pg_attribute_unused())
{
	drop_scope_cache();
}

/*
 * The rights of "userid", read from scope_grants (no access check: the
 * library reads its own table).
 */
static void
read_rights(ScopeRights *rights, Oid userid)
{
	Oid			nspid;
	Relation	rel;
	Snapshot	snapshot;
	TableScanDesc scan;
	TupleTableSlot *slot;
	AttrNumber	role_att,
				role_name_att,
				scope_att,
				prefix_att;
	int			room = 0;

	rights->restricted = false;
	rights->nentries = 0;
	rights->entries = NULL;
	nspid = get_namespace_oid("idempotency", true);
	scope_grants_relid = OidIsValid(nspid) ?
		get_relname_relid("scope_grants", nspid) : InvalidOid;
	if (!OidIsValid(scope_grants_relid) || superuser_arg(userid))
		return;

	role_att = idem_column_attnum(scope_grants_relid, "role");
	/* 1.8; absent before */
	role_name_att = get_attnum(scope_grants_relid, "role_name");
	scope_att = idem_column_attnum(scope_grants_relid, "scope");
	prefix_att = idem_column_attnum(scope_grants_relid, "is_prefix");
	/* (the rights are cached, and so is this answer with them) */
	idem_refuse_citus_table(scope_grants_relid, "scope_grants");
	rel = table_open(scope_grants_relid, AccessShareLock);
	/* a new snapshot (also in parallel mode, where GetLatestSnapshot() is refused) */
	snapshot = RegisterSnapshot(GetCatalogSnapshot(scope_grants_relid));
	scan = table_beginscan(rel, snapshot, 0, NULL);
	slot = table_slot_create(rel, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		role_null,
					scope_null,
					prefix_null;
		Oid			role;
		Datum		scope = slot_getattr(slot, scope_att, &scope_null);
		Datum		prefix = slot_getattr(slot, prefix_att, &prefix_null);
		text	   *scope_text;
		ScopeEntry *entry;

		if (role_name_att != InvalidAttrNumber)
		{
			Datum		role_name = slot_getattr(slot, role_name_att, &role_null);

			role = role_null ? InvalidOid :
				get_role_oid(NameStr(*DatumGetName(role_name)), true);
			/* no role of that name: the OID's, if any, stays restricted */
			if (!OidIsValid(role))
				role = DatumGetObjectId(slot_getattr(slot, role_att, &role_null));
			role_null = role_null || !OidIsValid(role);
		}
		else
			role = DatumGetObjectId(slot_getattr(slot, role_att, &role_null));
		if (role_null || scope_null || prefix_null ||
			!has_privs_of_role(userid, role))
			continue;
		rights->restricted = true;
		if (rights->nentries == room)
		{
			room = Max(8, room * 2);
			rights->entries = rights->entries == NULL ?
				MemoryContextAlloc(scope_context, sizeof(ScopeEntry) * room) :
				repalloc(rights->entries, sizeof(ScopeEntry) * room);
		}
		scope_text = DatumGetTextPP(scope);
		entry = &rights->entries[rights->nentries++];
		entry->len = VARSIZE_ANY_EXHDR(scope_text);
		entry->scope = MemoryContextAlloc(scope_context, entry->len + 1);
		memcpy(entry->scope, VARDATA_ANY(scope_text), entry->len);
		entry->scope[entry->len] = '\0';
		entry->is_prefix = DatumGetBool(prefix);
	}
	ExecDropSingleTupleTableSlot(slot);
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(rel, AccessShareLock);
}

/*
 * The rights of the calling role (GetUserId()).
 */
static ScopeRights *
current_rights(void)
{
	Oid			userid = GetUserId();
	ScopeRights *rights;
	ScopeRights fresh;
	bool		found;

	if (last_rights != NULL && last_rights->userid == userid)
		return last_rights;
	if (!scope_callbacks_set)
	{
		idem_on_relcache_change(scope_relcache_changed);
		CacheRegisterSyscacheCallback(AUTHMEMMEMROLE, scope_roles_changed, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHOID, scope_roles_changed, (Datum) 0);
		scope_callbacks_set = true;
	}
	if (scope_rights == NULL)
	{
		HASHCTL		ctl;

		if (scope_context == NULL)
			scope_context = AllocSetContextCreate(CacheMemoryContext,
												  "idempotency scope rights",
												  ALLOCSET_SMALL_SIZES);
		else
			MemoryContextReset(scope_context);
		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(ScopeRights);
		ctl.hcxt = scope_context;
		scope_rights = hash_create("idempotency scope rights", 16, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	rights = hash_search(scope_rights, &userid, HASH_FIND, NULL);
	if (rights == NULL)
	{
		HTAB	   *table = scope_rights;

		read_rights(&fresh, userid);
		/*
		 * An invalidation during the read, or a parallel worker (whose
		 * invalidations the leader handles): use what it read, keep nothing.
		 */
		if (scope_rights != table || IsInParallelMode())
		{
			rights = palloc(sizeof(ScopeRights));
			*rights = fresh;
			rights->userid = userid;
			return rights;
		}
		rights = hash_search(scope_rights, &userid, HASH_ENTER, &found);
		rights->restricted = fresh.restricted;
		rights->nentries = fresh.nentries;
		rights->entries = fresh.entries;
	}
	last_rights = rights;
	return rights;
}

static bool
rights_allow(const ScopeRights *rights, const char *scope, int len)
{
	int			i;

	if (!rights->restricted)
		return true;
	for (i = 0; i < rights->nentries; i++)
	{
		const ScopeEntry *entry = &rights->entries[i];

		if (entry->is_prefix ? (entry->len <= len &&
								memcmp(entry->scope, scope, entry->len) == 0)
			: (entry->len == len && memcmp(entry->scope, scope, len) == 0))
			return true;
	}
	return false;
}

/*
 * Whether the calling role may use "scope" (bytes, not terminated);
 * NULL: whether it may see what belongs to no scope, that is whether it
 * is unrestricted.
 */
bool
idem_scope_allowed(const char *scope, int len)
{
	ScopeRights *rights = current_rights();

	if (scope == NULL)
		return !rights->restricted;
	return rights_allow(rights, scope, len);
}

/*
 * Raise 42501 unless the calling role may use "scope".  Nothing about
 * the key is read first, so the error is the same whether it exists.
 */
void
idem_check_scope(text *scope)
{
	ScopeRights *rights = current_rights();

	if (!rights->restricted)
		return;
	if (!rights_allow(rights, VARDATA_ANY(scope), VARSIZE_ANY_EXHDR(scope)))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for scope \"%s\"",
						text_to_cstring(scope)),
				 errdetail("Role \"%s\" may use only the scopes that idempotency.grant_scopes() gave it.",
						   GetUserNameFromId(GetUserId(), false))));
}

/*
 * Trigger of scope_grants, AFTER each statement that writes it: the
 * sessions drop their cached rights (at this transaction's commit; this
 * one at its next command).
 */
Datum
idempotency_scope_grants_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("idempotency.scope_grants_changed() must be called as a trigger")));
	CacheInvalidateRelcache(trigdata->tg_relation);
	return PointerGetDatum(NULL);
}
