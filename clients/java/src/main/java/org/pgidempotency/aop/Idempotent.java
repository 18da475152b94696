package org.pgidempotency.aop;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * The method runs once per key: {@link IdempotentInterceptor} claims the
 * key, runs the method, stores its result (as JSON) and replays it to later
 * calls with the same key and arguments. The key is the argument at
 * {@link #keyArg}, or, when keyArg is -1, the request header {@link #header}
 * read through the interceptor's header source.
 */
@Documented
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.METHOD)
public @interface Idempotent {
    /** The index of the argument that holds the key (its toString()); -1: the header. */
    int keyArg() default -1;

    /** The header that holds the key when keyArg is -1. */
    String header() default "Idempotency-Key";

    /** Retention as an interval's text ("1 day"); empty: idempotency.default_ttl. */
    String ttl() default "";

    /** The holder's lease ("30 seconds"); empty: idempotency.lease_timeout. */
    String lease() default "";

    /** How long a duplicate call waits for the holder (extension 1.6); empty: no wait. */
    String waitFor() default "";

    /** The name the fingerprint uses for the operation; empty: Class.method. */
    String name() default "";
}
