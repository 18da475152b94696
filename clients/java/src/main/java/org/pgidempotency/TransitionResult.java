package org.pgidempotency;

/** transition_result (doc/reference.md, "State machines"). */
public record TransitionResult(Outcome outcome, String currentState) {
    /** applied, already, rejected or not_found. */
    public enum Outcome { APPLIED, ALREADY, REJECTED, NOT_FOUND }
}
