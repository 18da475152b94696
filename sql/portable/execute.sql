-- sql/portable/execute.sql: the portable body of src/execute.c, execute().
--
-- In the caller's transaction, with the caller's rights: check the
-- statement, claim the key (claim()), and when the claim is ours run the
-- statement, take the first column of its first row as jsonb and complete
-- the key (complete()).  As in the C, the checks come before the claim,
-- the statement runs to completion, and an error in it rolls back the
-- claim with the transaction.
--
-- PL/pgSQL cannot parse a statement without running it, so:
-- - a small lexer (strings, quoted names, dollar quotes, comments, $n)
--   counts the statements (none: 22023; several: 42601), finds the
--   transaction control statements (2D000) and COPY to or from the client
--   (0A000), and the parameters beyond those given (42P02);
-- - the statement is PREPAREd with one text parameter per element of
--   params, as the C binds them, once per session (pg_prepared_statements,
--   names idempotency_execute_<md5>, emptied at 1024 as the C's cache),
--   which reports syntax errors before the claim; whether it returns rows
--   the lexer tells (a query, or a change with RETURNING).  A statement that
--   PREPARE does not take (utility statements) runs as it is, without
--   parameters, and stores JSON null.
--
-- Edition differences (doc/portable.md): execute() is SECURITY INVOKER and
-- calls claim() and complete(), so the caller needs EXECUTE on them too
-- (grant_usage() grants them together); complete() reads the clock again
-- for updated_at (and response_expires_at); the key, scope and ttl are
-- checked by claim(), after the statement, and response_ttl after them;
-- the new key is written twice (claimed, then completed), where the C
-- writes it once.

-- portable: idempotency_execute_1_8, idempotency_execute_1_7, idempotency_execute_1_6, idempotency_execute
CREATE OR REPLACE FUNCTION idempotency.execute(
    key          text,
    request      jsonb,
    statement    text,
    params       text[]   DEFAULT '{}',
    scope        text     DEFAULT '',
    ttl          interval DEFAULT NULL,
    response_ttl interval DEFAULT NULL,
    wait         interval DEFAULT NULL)
RETURNS idempotency.claim_result
LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
AS $$
DECLARE
    chars text[];
    nchars integer;
    i integer := 1;
    j integer;
    c text;
    word text;
    tag text;
    statements integer := 0;
    in_statement boolean := false;
    first_words text[] := '{}';
    depth integer := 0;
    nparams integer := COALESCE(pg_catalog.cardinality(params), 0);
    bad_param integer;
    prepared text;
    verb text;
    returns_rows boolean;
    call text;
    row_value record;
    body jsonb := 'null';
    max_bytes integer;
    claim idempotency.claim_result;
    message text;
BEGIN
    IF statement IS NULL THEN
        RAISE EXCEPTION 'statement must not be null'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pg_catalog.array_ndims(params) OPERATOR(pg_catalog.>) 1 THEN
        RAISE EXCEPTION 'params must be a one-dimensional text array'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- the lexer: statements, the first statement's words outside
    -- parentheses, and the first parameter beyond those given
    IF statement OPERATOR(pg_catalog.<>) '' THEN
        chars := pg_catalog.regexp_split_to_array(statement, '');
        nchars := pg_catalog.cardinality(chars);
    ELSE
        nchars := 0;
    END IF;
    WHILE i OPERATOR(pg_catalog.<=) nchars LOOP
        c := chars[i];
        IF c OPERATOR(pg_catalog.~) '^\s$' THEN
            i := i OPERATOR(pg_catalog.+) 1;
        ELSIF c OPERATOR(pg_catalog.=) '-' AND chars[i OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.=) '-' THEN
            WHILE i OPERATOR(pg_catalog.<=) nchars AND chars[i] OPERATOR(pg_catalog.<>) E'\n' LOOP
                i := i OPERATOR(pg_catalog.+) 1;
            END LOOP;
        ELSIF c OPERATOR(pg_catalog.=) '/' AND chars[i OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.=) '*' THEN
            j := 0;             -- comments nest
            LOOP
                IF i OPERATOR(pg_catalog.>) nchars THEN
                    EXIT;
                ELSIF chars[i] OPERATOR(pg_catalog.=) '/' AND chars[i OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.=) '*' THEN
                    j := j OPERATOR(pg_catalog.+) 1;
                    i := i OPERATOR(pg_catalog.+) 2;
                ELSIF chars[i] OPERATOR(pg_catalog.=) '*' AND chars[i OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.=) '/' THEN
                    j := j OPERATOR(pg_catalog.-) 1;
                    i := i OPERATOR(pg_catalog.+) 2;
                    EXIT WHEN j OPERATOR(pg_catalog.=) 0;
                ELSE
                    i := i OPERATOR(pg_catalog.+) 1;
                END IF;
            END LOOP;
        ELSIF c OPERATOR(pg_catalog.=) ';' THEN
            IF in_statement THEN
                statements := statements OPERATOR(pg_catalog.+) 1;
                in_statement := false;
            END IF;
            depth := 0;
            i := i OPERATOR(pg_catalog.+) 1;
        ELSE
            in_statement := true;
            IF c OPERATOR(pg_catalog.=) '''' THEN
                -- a string; after a lone E, backslashes escape
                j := i;
                i := i OPERATOR(pg_catalog.+) 1;
                LOOP
                    EXIT WHEN i OPERATOR(pg_catalog.>) nchars;
                    IF chars[i] OPERATOR(pg_catalog.=) '\' AND j OPERATOR(pg_catalog.>) 1
                       AND pg_catalog.lower(chars[j OPERATOR(pg_catalog.-) 1]) OPERATOR(pg_catalog.=) 'e'
                       AND (j OPERATOR(pg_catalog.=) 2
                            OR chars[j OPERATOR(pg_catalog.-) 2] OPERATOR(pg_catalog.!~) '^[A-Za-z0-9_$]$') THEN
                        i := i OPERATOR(pg_catalog.+) 2;
                    ELSIF chars[i] OPERATOR(pg_catalog.=) '''' THEN
                        i := i OPERATOR(pg_catalog.+) 1;
                        EXIT WHEN i OPERATOR(pg_catalog.>) nchars OR chars[i] OPERATOR(pg_catalog.<>) '''';
                        i := i OPERATOR(pg_catalog.+) 1;
                    ELSE
                        i := i OPERATOR(pg_catalog.+) 1;
                    END IF;
                END LOOP;
            ELSIF c OPERATOR(pg_catalog.=) '"' THEN
                i := i OPERATOR(pg_catalog.+) 1;
                LOOP
                    EXIT WHEN i OPERATOR(pg_catalog.>) nchars;
                    IF chars[i] OPERATOR(pg_catalog.=) '"' THEN
                        i := i OPERATOR(pg_catalog.+) 1;
                        EXIT WHEN i OPERATOR(pg_catalog.>) nchars OR chars[i] OPERATOR(pg_catalog.<>) '"';
                    END IF;
                    i := i OPERATOR(pg_catalog.+) 1;
                END LOOP;
                IF statements OPERATOR(pg_catalog.=) 0 AND depth OPERATOR(pg_catalog.=) 0 THEN
                    first_words := first_words OPERATOR(pg_catalog.||) '"'::pg_catalog.text;
                END IF;
            ELSIF c OPERATOR(pg_catalog.=) '$' AND chars[i OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.~) '^[0-9]$' THEN
                j := i OPERATOR(pg_catalog.+) 1;
                WHILE j OPERATOR(pg_catalog.<=) nchars AND chars[j] OPERATOR(pg_catalog.~) '^[0-9]$' LOOP
                    j := j OPERATOR(pg_catalog.+) 1;
                END LOOP;
                IF bad_param IS NULL THEN
                    word := pg_catalog.array_to_string(chars[i OPERATOR(pg_catalog.+) 1 : j OPERATOR(pg_catalog.-) 1], '');
                    IF pg_catalog.length(word) OPERATOR(pg_catalog.>) 9
                       OR word::pg_catalog.int4 OPERATOR(pg_catalog.<) 1
                       OR word::pg_catalog.int4 OPERATOR(pg_catalog.>) nparams THEN
                        bad_param := CASE WHEN pg_catalog.length(word) OPERATOR(pg_catalog.>) 9
                                          THEN 2147483647 ELSE word::pg_catalog.int4 END;
                    END IF;
                END IF;
                i := j;
            ELSIF c OPERATOR(pg_catalog.=) '$' THEN
                -- a dollar quote: $tag$ ... $tag$
                j := i OPERATOR(pg_catalog.+) 1;
                WHILE j OPERATOR(pg_catalog.<=) nchars AND (chars[j] OPERATOR(pg_catalog.~) '^[A-Za-z0-9_]$'
                                                  OR pg_catalog.ascii(chars[j]) OPERATOR(pg_catalog.>) 127) LOOP
                    j := j OPERATOR(pg_catalog.+) 1;
                END LOOP;
                IF j OPERATOR(pg_catalog.<=) nchars AND chars[j] OPERATOR(pg_catalog.=) '$' THEN
                    tag := pg_catalog.array_to_string(chars[i : j], '');
                    j := pg_catalog.strpos(pg_catalog.substr(statement, j OPERATOR(pg_catalog.+) 1), tag);
                    i := CASE WHEN j OPERATOR(pg_catalog.=) 0 THEN nchars OPERATOR(pg_catalog.+) 1
                              ELSE i OPERATOR(pg_catalog.+) pg_catalog.length(tag) OPERATOR(pg_catalog.+) j
                                   OPERATOR(pg_catalog.-) 1 OPERATOR(pg_catalog.+) pg_catalog.length(tag) END;
                ELSE
                    i := i OPERATOR(pg_catalog.+) 1;
                END IF;
            ELSIF c OPERATOR(pg_catalog.~) '^[A-Za-z_]$' OR pg_catalog.ascii(c) OPERATOR(pg_catalog.>) 127 THEN
                j := i;
                WHILE j OPERATOR(pg_catalog.<=) nchars AND (chars[j] OPERATOR(pg_catalog.~) '^[A-Za-z0-9_$]$'
                                                  OR pg_catalog.ascii(chars[j]) OPERATOR(pg_catalog.>) 127) LOOP
                    j := j OPERATOR(pg_catalog.+) 1;
                END LOOP;
                IF statements OPERATOR(pg_catalog.=) 0 AND depth OPERATOR(pg_catalog.=) 0 THEN
                    first_words := first_words OPERATOR(pg_catalog.||)
                        pg_catalog.lower(pg_catalog.array_to_string(chars[i : j OPERATOR(pg_catalog.-) 1], ''));
                END IF;
                i := j;
            ELSE
                IF c OPERATOR(pg_catalog.=) '(' THEN
                    depth := depth OPERATOR(pg_catalog.+) 1;
                ELSIF c OPERATOR(pg_catalog.=) ')' THEN
                    depth := depth OPERATOR(pg_catalog.-) 1;
                END IF;
                IF statements OPERATOR(pg_catalog.=) 0 AND pg_catalog.cardinality(first_words) OPERATOR(pg_catalog.=) 0 THEN
                    first_words := first_words OPERATOR(pg_catalog.||) c;
                END IF;
                i := i OPERATOR(pg_catalog.+) 1;
            END IF;
        END IF;
    END LOOP;
    IF in_statement THEN
        statements := statements OPERATOR(pg_catalog.+) 1;
    END IF;

    IF statements OPERATOR(pg_catalog.=) 0 THEN
        RAISE EXCEPTION 'statement must not be empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF statements OPERATOR(pg_catalog.>) 1 THEN
        RAISE EXCEPTION 'execute() runs exactly one SQL statement'
            USING ERRCODE = 'syntax_error',
                  DETAIL = pg_catalog.format('The statement text holds %s statements.', statements),
                  HINT = 'Put the work in one statement, for example with a WITH clause, or use claim() and complete() around several statements.';
    END IF;
    IF first_words[1] OPERATOR(pg_catalog.=) ANY ('{begin,start,commit,end,rollback,abort,savepoint,release}'::pg_catalog.text[])
       OR (first_words[1] OPERATOR(pg_catalog.=) 'prepare' AND first_words[2] OPERATOR(pg_catalog.=) 'transaction') THEN
        RAISE EXCEPTION 'execute() cannot run transaction control statements'
            USING ERRCODE = 'invalid_transaction_termination',
                  DETAIL = 'The statement runs in the caller''s transaction, which commits or rolls back the key with it.',
                  HINT = 'Commit or roll back in the caller, after execute() returns.';
    END IF;
    IF first_words[1] OPERATOR(pg_catalog.=) 'copy'
       AND (first_words OPERATOR(pg_catalog.@>) '{stdin}' OR first_words OPERATOR(pg_catalog.@>) '{stdout}') THEN
        RAISE EXCEPTION 'execute() cannot run COPY to or from the client'
            USING ERRCODE = 'feature_not_supported';
    END IF;
    IF bad_param IS NOT NULL THEN
        RAISE EXCEPTION 'there is no parameter $%', bad_param
            USING ERRCODE = 'undefined_parameter';
    END IF;

    -- prepared once per session, with text parameters; PREPARE reports
    -- the statement's syntax errors
    IF first_words[1] OPERATOR(pg_catalog.=) ANY ('{select,insert,update,delete,merge,values,with,table,(}'::pg_catalog.text[]) THEN
        prepared := 'idempotency_execute_' OPERATOR(pg_catalog.||)
                    pg_catalog.md5(nparams::pg_catalog.text OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) statement);
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_prepared_statements p
                        WHERE p.name OPERATOR(pg_catalog.=) prepared) THEN
            IF (SELECT pg_catalog.count(*) FROM pg_catalog.pg_prepared_statements p
                 WHERE p.name OPERATOR(pg_catalog.~~) 'idempotency\_execute\_%') OPERATOR(pg_catalog.>=) 1024 THEN
                FOR call IN SELECT p.name FROM pg_catalog.pg_prepared_statements p
                             WHERE p.name OPERATOR(pg_catalog.~~) 'idempotency\_execute\_%' LOOP
                    EXECUTE pg_catalog.format('DEALLOCATE %I', call);
                END LOOP;
            END IF;
            EXECUTE pg_catalog.format('PREPARE %I%s AS %s', prepared,
                CASE WHEN nparams OPERATOR(pg_catalog.>) 0
                     THEN '(' OPERATOR(pg_catalog.||) pg_catalog.array_to_string(
                              pg_catalog.array_fill('text'::pg_catalog.text, ARRAY[nparams]), ', ')
                          OPERATOR(pg_catalog.||) ')'
                     ELSE '' END,
                statement);
        END IF;
        -- rows: a query, or a change with RETURNING (after WITH, the
        -- first of these words outside parentheses is the statement's)
        verb := first_words[1];
        IF verb OPERATOR(pg_catalog.=) 'with' THEN
            SELECT w.word INTO verb
              FROM pg_catalog.unnest(first_words) WITH ORDINALITY AS w(word, n)
             WHERE w.word OPERATOR(pg_catalog.=) ANY ('{select,values,table,insert,update,delete,merge}'::pg_catalog.text[])
             ORDER BY w.n LIMIT 1;
        END IF;
        returns_rows := verb OPERATOR(pg_catalog.=) ANY ('{select,values,table,(}'::pg_catalog.text[])
                        OR (verb OPERATOR(pg_catalog.=) ANY ('{insert,update,delete,merge}'::pg_catalog.text[])
                            AND first_words OPERATOR(pg_catalog.@>) '{returning}');
        call := pg_catalog.format('EXECUTE %I', prepared);
        IF nparams OPERATOR(pg_catalog.>) 0 THEN
            call := call OPERATOR(pg_catalog.||) '(' OPERATOR(pg_catalog.||)
                    (SELECT pg_catalog.string_agg(pg_catalog.quote_nullable(p.value), ', ' ORDER BY p.n)
                       FROM pg_catalog.unnest(params) WITH ORDINALITY AS p(value, n))
                    OPERATOR(pg_catalog.||) ')';
        END IF;
    ELSE
        returns_rows := false;
        call := statement;
    END IF;

    -- the claim; in a read-only transaction its error names execute()
    -- (only there: the block is a subtransaction).  A call of the
    -- signature before 1.6 has no wait, nor has claim() there.
    IF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
        BEGIN
            IF wait IS NULL THEN
                claim := idempotency.claim(key, request, scope, ttl);
            ELSE
                claim := idempotency.claim(key, request, scope, ttl, wait => wait);
            END IF;
        EXCEPTION WHEN read_only_sql_transaction THEN
            GET STACKED DIAGNOSTICS message = MESSAGE_TEXT;
            RAISE EXCEPTION '%', pg_catalog.replace(message, 'idempotency.claim()', 'idempotency.execute()')
                USING ERRCODE = 'read_only_sql_transaction';
        END;
    ELSIF wait IS NULL THEN
        claim := idempotency.claim(key, request, scope, ttl);
    ELSE
        claim := idempotency.claim(key, request, scope, ttl, wait => wait);
    END IF;
    -- response_ttl as complete() checks it (the caller may not call the
    -- owner's portable_arg_interval), whatever the claim's outcome
    IF response_ttl OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval THEN
        RAISE EXCEPTION 'response_ttl must be positive'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = pg_catalog.format('The response_ttl given is %s.', response_ttl);
    ELSIF response_ttl OPERATOR(pg_catalog.>) '1200 mons'::pg_catalog.interval THEN
        RAISE EXCEPTION 'response_ttl must be at most 100 years'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- replay, gone, in_progress, mismatch: the stored row, nothing run
    IF claim.outcome OPERATOR(pg_catalog.<>) ALL ('{claimed,resumed}'::pg_catalog.text[]) THEN
        RETURN claim;
    END IF;

    -- the statement, to completion, with the caller's rights
    IF returns_rows THEN
        EXECUTE call INTO row_value;
        GET DIAGNOSTICS j = ROW_COUNT;      -- EXECUTE leaves FOUND alone
        IF j OPERATOR(pg_catalog.>) 0 THEN
            SELECT e.value::pg_catalog.jsonb INTO body
              FROM pg_catalog.json_each(pg_catalog.row_to_json(row_value)) e
             LIMIT 1;
            body := COALESCE(body, 'null');
        END IF;
    ELSE
        EXECUTE call;
    END IF;
    message := pg_catalog.current_setting('idempotency.max_response_bytes', true);
    -- a plain decimal within the C's bounds, else NULL: complete(), which
    -- the caller may call and the owner's readers not, reads the rest
    -- (idempotency.portable_setting_int) and refuses a bad value
    max_bytes := CASE WHEN message IS NULL OR message OPERATOR(pg_catalog.=) '' THEN 1048576
                      WHEN message OPERATOR(pg_catalog.~) '^[1-9][0-9]{0,8}$'
                      THEN CASE WHEN message::pg_catalog.int4 OPERATOR(pg_catalog.<=) 268435456
                                THEN message::pg_catalog.int4 END END;
    IF pg_catalog.pg_column_size(body) OPERATOR(pg_catalog.>) max_bytes THEN
        RAISE EXCEPTION 'result of the statement is too large to store'
            USING ERRCODE = 'program_limit_exceeded',
                  DETAIL = pg_catalog.format('It takes %s bytes; idempotency.max_response_bytes allows %s.',
                                             pg_catalog.pg_column_size(body), max_bytes);
    END IF;

    IF response_ttl IS NULL THEN        -- the only form before 1.6
        PERFORM idempotency.complete(key, claim.fence, body, 200, scope);
    ELSE
        PERFORM idempotency.complete(key, claim.fence, body, 200, scope, response_ttl => response_ttl);
    END IF;
    claim.status := 'completed';
    claim.response_code := 200;
    claim.response_body := body;
    RETURN claim;
END
$$;
