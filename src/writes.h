/*-------------------------------------------------------------------------
 *
 * writes.h
 *	  Direct writes: rows inserted and updated with the executor's row
 *	  functions, and the locks for creating unique keys (writes.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_WRITES_H
#define IDEM_WRITES_H

#include "executor/tuptable.h"

#include "relations.h"

/* The outcome of idem_insert_row() and idem_update_row() (writes.c). */
typedef enum IdemWriteResult
{
	IDEM_WRITE_DONE,
	IDEM_WRITE_SKIPPED,			/* by a BEFORE trigger */
	IDEM_WRITE_NO_ROW,			/* no row to update */
	IDEM_WRITE_BY_STATEMENT		/* nothing done: run the statement */
} IdemWriteResult;

/* Whether a row found by idem_update_row() is the one to update. */
typedef bool (*IdemRowTest) (TupleTableSlot *slot, void *arg);

/* Set the updated columns in a row's values (one per attribute). */
typedef void (*IdemRowChange) (Datum *values, bool *isnull, void *arg);

/*
 * The columns that the statement a direct write stands for names, as its
 * permission check sees them (writes.c): those it writes (an INSERT's
 * column list, an UPDATE's SET list) and those it reads (a WHERE clause,
 * SET expressions, RETURNING), by attribute number, in an order of the
 * caller's that stays the same from call to call.
 */
typedef struct IdemStatementColumns
{
	const AttrNumber *written;
	int			nwritten;
	const AttrNumber *read;
	int			nread;
} IdemStatementColumns;

typedef struct IdemRowInserter IdemRowInserter;

extern IdemWriteResult idem_insert_row(Relation rel, const Datum *values,
									   const bool *isnull, const bool *given,
									   const IdemStatementColumns *columns);
extern IdemRowInserter *idem_begin_inserts(Relation rel, const bool *given,
										   const IdemStatementColumns *columns);
extern bool idem_insert_next(IdemRowInserter *inserter, const Datum *values,
							 const bool *isnull);
extern Datum idem_inserted_value(IdemRowInserter *inserter, AttrNumber attnum,
								 bool *isnull);
extern bool idem_inserts_check_only(IdemRowInserter *inserter,
									Relation index);
extern void idem_end_inserts(IdemRowInserter *inserter);
extern IdemWriteResult idem_update_row(IdemIndexScan *scan,
									   const IdemStatementColumns *columns,
									   IdemRowTest matches, IdemRowChange change,
									   void *arg);

/*
 * The lock a transaction holds while it creates the row of a unique key
 * that no ON CONFLICT guards (writes.c): an advisory lock on 64 bits of a
 * hash of the key, in a space (pg_locks objsubid) of its own per table,
 * where pg_advisory_lock uses 1 and 2 and the outbox's locks 4.
 */
#define IDEM_CREATE_KEY_SPACE 3
#define IDEM_CREATE_MARK_SPACE 5

extern bool idem_lock_creation(uint64 hash, uint16 space);
extern void idem_unlock_creation(uint64 hash, uint16 space);
extern bool idem_holds_creation_lock(void);
extern void idem_wait_for_creator(uint64 hash, uint16 space,
								  TransactionId xid);

#endif							/* IDEM_WRITES_H */
