-- sql/portable/execute.sql: the portable body of src/execute.c, execute().
--
-- In the caller's transaction, with the caller's rights: check the
-- statement, claim the key (claim()), and when the claim is ours run the
-- statement, take the first column of its first row as jsonb and complete
-- the key (complete()).  As in the C, the statement runs to completion,
-- and an error in it rolls back the claim with the transaction.
--
-- PL/pgSQL cannot parse a statement without running it, so:
-- - a small lexer (strings, quoted names, dollar quotes, comments, $n)
--   counts the statements (none: 22023; several: 42601), finds the
--   transaction control statements (2D000) and COPY to or from the client
--   (0A000), and the parameters beyond those given (42P02), before the
--   claim.  It reads the text as the server's scanner will, under the
--   session's standard_conforming_strings (a plain '...' takes backslash
--   escapes when it is off), with E'', B'' and X'' strings and strings
--   continued on the next line: the server runs every statement of the
--   text it is given, so one that the lexer missed would run unchecked;
-- - a statement that PREPARE takes runs as PL/pgSQL's EXECUTE ... USING
--   params, each $n rewritten to ($1[n]) by the lexer, so every parameter
--   is text, as the C binds them.  Nothing is prepared under a name a
--   caller could know, nor left in the session: a statement planted under
--   such a name (behind a transaction pooler, by an earlier client of the
--   server session) cannot run in the caller's place.  Whether it returns
--   rows the lexer tells (a query, or a change with RETURNING);
-- - a statement that does not run (replay, in_progress, mismatch, gone),
--   and every statement before a claim that may wait, is checked as the
--   C checks it: PREPARE under a random name, then DEALLOCATE at once;
--   a claimed one is checked by running it;
-- - a statement that PREPARE does not take (a utility statement) runs as
--   it is, without parameters, and stores JSON null.
--
-- The body has no backslash in a plain '...' literal (scripts/portable.py
-- refuses one): the caller's standard_conforming_strings would change its
-- meaning, as PL/pgSQL compiles the body in the caller's session.
--
-- Edition differences (doc/portable.md): execute() is SECURITY INVOKER and
-- calls claim() and complete(), so the caller needs EXECUTE on them too
-- (grant_usage() grants them together); complete() reads the clock again
-- for updated_at (and response_expires_at); the lexer's checks come before
-- the key, scope and ttl, which claim() checks, and response_ttl after
-- them; a claimed statement's syntax errors come after those; the new key
-- is written twice (claimed, then completed), where the C writes it once.

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
    i integer;
    j integer;
    c text;
    word text;
    tag text;
    -- how the server reads a string: 'e' takes backslash escapes, 'q'
    -- does not, 'b' (B'', X'') neither, and ends at any quote; a plain
    -- '...' takes them when standard_conforming_strings is off
    quoting text;
    plain_quoting text;
    newline boolean;
    -- the scanner's white space (PostgreSQL 16 adds \v; 15 refuses it)
    spaces text;
    statements integer := 0;
    in_statement boolean;
    first_words text[];
    depth integer;
    nparams integer := COALESCE(pg_catalog.cardinality(params), 0);
    bad_param integer;
    rewritten text;
    copied integer;
    pieces text[];
    by_characters boolean := true;
    preparable boolean;
    checking text;
    verb text;
    returns_rows boolean;
    row_value record;
    body jsonb := 'null'::pg_catalog.jsonb;     -- (typed: no cast at each call)
    max_bytes integer;
    claim idempotency.claim_result;
    message text;
BEGIN
    -- (the usual arguments pass one test: each expression costs its
    -- set-up at every transaction)
    IF statement IS NULL OR pg_catalog.array_ndims(params) OPERATOR(pg_catalog.>) 1
       OR pg_catalog.array_lower(params, 1) OPERATOR(pg_catalog.<>) 1 THEN
        IF statement IS NULL THEN
            RAISE EXCEPTION 'statement must not be null'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF pg_catalog.array_ndims(params) OPERATOR(pg_catalog.>) 1 THEN
            RAISE EXCEPTION 'params must be a one-dimensional text array'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- $n is the n-th element whatever the array's bounds, as the C reads it
        params := ARRAY(SELECT pg_catalog.unnest(params));
    END IF;

    -- the lexer: statements, the first statement's words outside
    -- parentheses, the first parameter beyond those given, and the text
    -- with each $n as ($1[n])
    --
    -- A text of ASCII words, numbers, white space, operators and $n only
    -- (no quote, comment, semicolon or dollar quote, no $ that is not a
    -- parameter's: the usual INSERT ... RETURNING of $1, $2) is one
    -- statement whose words and parameters a few regular expressions find
    -- as the character lexer below would (1.9: that lexer costs an
    -- iteration per character); any other text, and one whose parentheses
    -- do not pair, is read by that lexer.
    IF statement OPERATOR(pg_catalog.!~)
       E'[^-A-Za-z0-9_ \t\n\r(),.*+<>=:!|&%^[\\]{}@#~?/$]|--|/[*]|[$]([^0-9]|$)|[A-Za-z0-9_$][$]|^[ \t\n\r]*[$]' THEN
        -- the words outside parentheses, lower case: without the
        -- parameters and the numbers (digits that start a token), then
        -- without the innermost parenthesized groups until none is left
        word := pg_catalog.regexp_replace(pg_catalog.lower(statement), '(^|[^a-z0-9_$])[$0-9]+', E'\\1', 'g');
        WHILE pg_catalog.strpos(word, '(') OPERATOR(pg_catalog.>) 0 LOOP
            c := word;
            word := pg_catalog.regexp_replace(word, '[(][^()]*[)]', ' ', 'g');
            EXIT WHEN word OPERATOR(pg_catalog.=) c;
        END LOOP;
        by_characters := pg_catalog.strpos(word, '(') OPERATOR(pg_catalog.>) 0
                         OR pg_catalog.strpos(word, ')') OPERATOR(pg_catalog.>) 0;
    END IF;
    IF NOT by_characters THEN
        first_words := pg_catalog.array_remove(pg_catalog.regexp_split_to_array(word, '[^a-z0-9_$]+'), '');
        -- a first character that starts no word is the first word, as the
        -- character lexer takes it
        word := pg_catalog.substr(pg_catalog.ltrim(statement, E' \t\n\r'), 1, 1);
        IF word OPERATOR(pg_catalog.<>) '' THEN
            statements := 1;
            IF word OPERATOR(pg_catalog.!~) '^[A-Za-z_]' THEN
                first_words := ARRAY[word] OPERATOR(pg_catalog.||) first_words;
            END IF;
        END IF;
        -- each $n, as the character lexer rewrites it
        pieces := pg_catalog.string_to_array(statement, '$');
        rewritten := COALESCE(pieces[1], '');
        FOR k IN 2 .. pg_catalog.cardinality(pieces) LOOP
            word := pg_catalog.substring(pieces[k], '^[0-9]+');
            IF pg_catalog.length(word) OPERATOR(pg_catalog.>) 9
               OR word::pg_catalog.int4 OPERATOR(pg_catalog.<) 1
               OR word::pg_catalog.int4 OPERATOR(pg_catalog.>) nparams THEN
                bad_param := CASE WHEN pg_catalog.length(word) OPERATOR(pg_catalog.>) 9
                                  THEN 2147483647 ELSE word::pg_catalog.int4 END;
                -- the rest as it is, as the character lexer leaves it
                rewritten := pg_catalog.concat(rewritten, '$',
                    pg_catalog.array_to_string(pieces[k : pg_catalog.cardinality(pieces)], '$'));
                EXIT;
            END IF;
            rewritten := pg_catalog.concat(rewritten, '($1[', word::pg_catalog.int4, '])',
                                           pg_catalog.substr(pieces[k], pg_catalog.length(word) OPERATOR(pg_catalog.+) 1));
        END LOOP;
    ELSE
        i := 1;
        in_statement := false;
        first_words := '{}';
        depth := 0;
        rewritten := '';
        copied := 1;
        IF statement OPERATOR(pg_catalog.<>) '' THEN
            chars := pg_catalog.regexp_split_to_array(statement, '');
            nchars := pg_catalog.cardinality(chars);
        ELSE
            nchars := 0;
        END IF;
        plain_quoting := CASE WHEN pg_catalog.current_setting('standard_conforming_strings')
                                   OPERATOR(pg_catalog.=) 'off' THEN 'e' ELSE 'q' END;
        spaces := pg_catalog.concat(' ', pg_catalog.chr(9), pg_catalog.chr(10), pg_catalog.chr(11),
                                    pg_catalog.chr(12), pg_catalog.chr(13));
        WHILE i OPERATOR(pg_catalog.<=) nchars LOOP
            c := chars[i];
            IF pg_catalog.strpos(spaces, c) OPERATOR(pg_catalog.>) 0 THEN
                i := i OPERATOR(pg_catalog.+) 1;
            ELSIF c OPERATOR(pg_catalog.=) '-' AND chars[i OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.=) '-' THEN
                -- to the end of the line, which \r ends too
                WHILE i OPERATOR(pg_catalog.<=) nchars AND chars[i] OPERATOR(pg_catalog.<>) E'\n'
                      AND chars[i] OPERATOR(pg_catalog.<>) E'\r' LOOP
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
                -- a string: '...', or E'...', B'...', X'...' (the loop is at
                -- the start of a token, or after digits, where PostgreSQL 15
                -- and later refuse a letter and older ones start a new token)
                quoting := NULL;
                IF c OPERATOR(pg_catalog.=) '''' THEN
                    quoting := plain_quoting;
                ELSIF chars[i OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.=) ''''
                      AND pg_catalog.lower(c) OPERATOR(pg_catalog.=) ANY ('{e,b,x}'::pg_catalog.text[]) THEN
                    quoting := CASE WHEN pg_catalog.lower(c) OPERATOR(pg_catalog.=) 'e' THEN 'e' ELSE 'b' END;
                    i := i OPERATOR(pg_catalog.+) 1;
                END IF;
                IF quoting IS NOT NULL THEN
                    i := i OPERATOR(pg_catalog.+) 1;
                    LOOP
                        EXIT WHEN i OPERATOR(pg_catalog.>) nchars;
                        IF chars[i] OPERATOR(pg_catalog.=) E'\\' AND quoting OPERATOR(pg_catalog.=) 'e' THEN
                            i := i OPERATOR(pg_catalog.+) 2;
                        ELSIF chars[i] OPERATOR(pg_catalog.=) '''' THEN
                            i := i OPERATOR(pg_catalog.+) 1;
                            IF chars[i] OPERATOR(pg_catalog.=) '''' AND quoting OPERATOR(pg_catalog.<>) 'b' THEN
                                i := i OPERATOR(pg_catalog.+) 1;
                            ELSE
                                -- the end, unless white space and comments
                                -- holding a newline, then a quote, follow:
                                -- the string goes on there, read the same way
                                j := i;
                                newline := false;
                                LOOP
                                    EXIT WHEN j OPERATOR(pg_catalog.>) nchars;
                                    IF chars[j] OPERATOR(pg_catalog.=) E'\n' OR chars[j] OPERATOR(pg_catalog.=) E'\r' THEN
                                        newline := true;
                                        j := j OPERATOR(pg_catalog.+) 1;
                                    ELSIF pg_catalog.strpos(spaces, chars[j]) OPERATOR(pg_catalog.>) 0 THEN
                                        j := j OPERATOR(pg_catalog.+) 1;
                                    ELSIF chars[j] OPERATOR(pg_catalog.=) '-' AND chars[j OPERATOR(pg_catalog.+) 1] OPERATOR(pg_catalog.=) '-' THEN
                                        WHILE j OPERATOR(pg_catalog.<=) nchars AND chars[j] OPERATOR(pg_catalog.<>) E'\n'
                                              AND chars[j] OPERATOR(pg_catalog.<>) E'\r' LOOP
                                            j := j OPERATOR(pg_catalog.+) 1;
                                        END LOOP;
                                    ELSE
                                        EXIT;
                                    END IF;
                                END LOOP;
                                EXIT WHEN NOT newline OR chars[j] IS NULL OR chars[j] OPERATOR(pg_catalog.<>) '''';
                                i := j OPERATOR(pg_catalog.+) 1;
                            END IF;
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
                        ELSE
                            rewritten := pg_catalog.concat(rewritten,
                                                           pg_catalog.substr(statement, copied, i OPERATOR(pg_catalog.-) copied),
                                                           '($1[', word::pg_catalog.int4, '])');
                            copied := j;
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
        rewritten := rewritten OPERATOR(pg_catalog.||) pg_catalog.substr(statement, copied);
    END IF;

    -- (one test for the usual statement, as above)
    IF statements OPERATOR(pg_catalog.<>) 1 OR bad_param IS NOT NULL
       OR first_words[1] OPERATOR(pg_catalog.=)
          ANY ('{begin,start,commit,end,rollback,abort,savepoint,release,prepare,copy}'::pg_catalog.text[]) THEN
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
    END IF;

    -- rows: a query, or a change with RETURNING (after WITH, the first of
    -- these words outside parentheses is the statement's)
    preparable := first_words[1] OPERATOR(pg_catalog.=) ANY ('{select,insert,update,delete,merge,values,with,table,(}'::pg_catalog.text[]);
    verb := first_words[1];
    IF verb OPERATOR(pg_catalog.=) 'with' THEN
        SELECT w.word INTO verb
          FROM pg_catalog.unnest(first_words) WITH ORDINALITY AS w(word, n)
         WHERE w.word OPERATOR(pg_catalog.=) ANY ('{select,values,table,insert,update,delete,merge}'::pg_catalog.text[])
         ORDER BY w.n LIMIT 1;
    END IF;
    returns_rows := preparable
                    AND (verb OPERATOR(pg_catalog.=) ANY ('{select,values,table,(}'::pg_catalog.text[])
                         OR (verb OPERATOR(pg_catalog.=) ANY ('{insert,update,delete,merge}'::pg_catalog.text[])
                             AND first_words OPERATOR(pg_catalog.@>) '{returning}'));
    -- the check of a statement that will not run, or not yet: PREPARE
    -- reports its syntax and analysis errors, under a name no one can
    -- know (one planted under it could only make PREPARE fail, 42P05)
    IF wait IS NOT NULL AND preparable THEN     -- before a claim that may wait
        checking := 'idempotency_check_' OPERATOR(pg_catalog.||) pg_catalog.gen_random_uuid();
        EXECUTE pg_catalog.format('PREPARE %I(pg_catalog.text[]) AS %s', checking, rewritten);
        EXECUTE pg_catalog.format('DEALLOCATE %I', checking);
    END IF;

    -- the claim; in a read-only transaction its error names execute()
    -- (only there: the block is a subtransaction).  A call of the
    -- signature before 1.6 has no wait, nor has claim() there.
    IF wait IS NULL AND pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'off' THEN
        claim := idempotency.claim(key, request, scope, ttl);
    ELSIF pg_catalog.current_setting('transaction_read_only') OPERATOR(pg_catalog.=) 'on' THEN
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
    ELSE
        claim := idempotency.claim(key, request, scope, ttl, wait => wait);
    END IF;
    -- response_ttl as complete() checks it (the caller may not call the
    -- owner's portable_arg_interval), whatever the claim's outcome
    IF response_ttl OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval
       OR response_ttl OPERATOR(pg_catalog.>) '1200 mons'::pg_catalog.interval THEN
        IF response_ttl OPERATOR(pg_catalog.<=) '0'::pg_catalog.interval THEN
            RAISE EXCEPTION 'response_ttl must be positive'
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = pg_catalog.format('The response_ttl given is %s.', response_ttl);
        END IF;
        RAISE EXCEPTION 'response_ttl must be at most 100 years'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- replay, gone, in_progress, mismatch: the stored row, nothing run
    IF claim.outcome OPERATOR(pg_catalog.<>) ALL ('{claimed,resumed}'::pg_catalog.text[]) THEN
        IF wait IS NULL AND preparable THEN
            checking := 'idempotency_check_' OPERATOR(pg_catalog.||) pg_catalog.gen_random_uuid();
            EXECUTE pg_catalog.format('PREPARE %I(pg_catalog.text[]) AS %s', checking, rewritten);
            EXECUTE pg_catalog.format('DEALLOCATE %I', checking);
        END IF;
        RETURN claim;
    END IF;

    -- the statement, to completion, with the caller's rights
    IF NOT preparable THEN
        EXECUTE statement;
    ELSIF returns_rows THEN
        EXECUTE rewritten INTO row_value USING params;
        GET DIAGNOSTICS j = ROW_COUNT;      -- EXECUTE leaves FOUND alone
        IF j OPERATOR(pg_catalog.>) 0 THEN
            SELECT e.value::pg_catalog.jsonb INTO body
              FROM pg_catalog.json_each(pg_catalog.row_to_json(row_value)) e
             LIMIT 1;
            body := COALESCE(body, 'null');
        END IF;
    ELSE
        EXECUTE rewritten USING params;
    END IF;
    -- the size, in one test while the setting is unset or empty
    IF COALESCE(pg_catalog.current_setting('idempotency.max_response_bytes', true), '') OPERATOR(pg_catalog.<>) ''
       OR pg_catalog.pg_column_size(body) OPERATOR(pg_catalog.>) 1048576 THEN
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
    END IF;

    -- (assignments of complete()'s void, not PERFORM: no statement each)
    IF response_ttl IS NULL THEN        -- the only form before 1.6
        message := idempotency.complete(key, claim.fence, body, 200, scope)::pg_catalog.text;
    ELSE
        message := idempotency.complete(key, claim.fence, body, 200, scope,
                                        response_ttl => response_ttl)::pg_catalog.text;
    END IF;
    RETURN ROW(claim.outcome, claim.fence, 'completed', 200, body, claim.recovery_point, claim.attempts,
               claim.retry_after)::idempotency.claim_result;
END
$$;
