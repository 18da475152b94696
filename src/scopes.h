/*-------------------------------------------------------------------------
 *
 * scopes.h
 *	  The scopes a role may use, grant_scopes (scopes.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef IDEM_SCOPES_H
#define IDEM_SCOPES_H

extern void idem_check_scope(text *scope);
extern bool idem_scope_allowed(const char *scope, int len);

#endif							/* IDEM_SCOPES_H */
