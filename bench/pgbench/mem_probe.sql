-- appended to every mem_*.sql by bench/run.sh: backend memory after 1000, 2000, :half and :last calls
\if :n = 1000 or :n = 2000 or :n = :half or :n = :last
INSERT INTO bench.memory_probe SELECT :n, sum(total_bytes) FROM pg_backend_memory_contexts;
\endif
