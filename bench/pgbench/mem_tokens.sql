SELECT idempotency.consume_token(idempotency.issue_token());
