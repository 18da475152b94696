package org.pgidempotency.aop;

import com.fasterxml.jackson.databind.JavaType;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.function.Supplier;
import org.aopalliance.intercept.MethodInterceptor;
import org.aopalliance.intercept.MethodInvocation;
import org.pgidempotency.ClaimOutcome;
import org.pgidempotency.Idempotency;
import org.pgidempotency.IdempotencyException;
import org.pgidempotency.Json;
import org.pgidempotency.http.Answer;
import org.pgidempotency.http.Exchange;
import org.pgidempotency.http.Policy;

/**
 * An org.aopalliance MethodInterceptor (Spring AOP, Guice) for methods
 * annotated {@link Idempotent}: the first call with a key runs the method
 * and stores its result as JSON; a later call with the same key and the
 * same other arguments returns the stored result (deserialized into the
 * method's return type) without running it. Methods without the annotation
 * run as they are.
 *
 * <ul>
 * <li>another call with the key still running: {@link KeyInProgressException} (retryAfter)</li>
 * <li>the key used with other arguments: {@link KeyMismatchException}</li>
 * <li>the stored result no longer kept (1.6 response_ttl): {@link AnswerGoneException}</li>
 * <li>the method throws: the key is failed retryably (the next call runs again) and the exception rethrown</li>
 * <li>an invalid key (empty, over 400 characters, control characters): IllegalArgumentException</li>
 * <li>the lease lost before the result was stored: {@link IdempotencyException.LeaseLostException}</li>
 * </ul>
 */
public final class IdempotentInterceptor implements MethodInterceptor {
    private final Idempotency idem;
    private final Supplier<String> scope;
    private final Function<String, String> headers;

    /**
     * scope: the caller's owner (tenant or user; null refuses the call);
     * headers: a request header by name (say from Spring's injected
     * HttpServletRequest), for keys that come from a header.
     */
    public IdempotentInterceptor(Idempotency idem, Supplier<String> scope, Function<String, String> headers) {
        this.idem = idem;
        this.scope = scope;
        this.headers = headers;
    }

    public IdempotentInterceptor(Idempotency idem) {
        this(idem, () -> "", name -> null);
    }

    /** Another call with this key is running. */
    public static class KeyInProgressException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        private final long retryAfterSeconds;
        public KeyInProgressException(String m, long retryAfterSeconds) {
            super(m, null, null);
            this.retryAfterSeconds = retryAfterSeconds;
        }
        public long retryAfterSeconds() { return retryAfterSeconds; }
    }

    /** The key was used with other arguments. */
    public static class KeyMismatchException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public KeyMismatchException(String m) { super(m, null, null); }
    }

    /** The call ran; its stored result is no longer kept, and it does not run again. */
    public static class AnswerGoneException extends IdempotencyException {
        private static final long serialVersionUID = 1L;
        public AnswerGoneException(String m) { super(m, null, null); }
    }

    @Override
    public Object invoke(MethodInvocation invocation) throws Throwable {
        Method method = invocation.getMethod();
        Idempotent spec = method.getAnnotation(Idempotent.class);
        if (spec == null && invocation.getThis() != null) {
            // a JDK proxy hands over the interface's method: the annotation may be on the class's
            try {
                spec = invocation.getThis().getClass().getMethod(method.getName(), method.getParameterTypes())
                    .getAnnotation(Idempotent.class);
            } catch (NoSuchMethodException e) {
                spec = null;
            }
        }
        if (spec == null) {
            return invocation.proceed();
        }
        Object[] args = invocation.getArguments();
        String key;
        if (spec.keyArg() >= 0) {
            key = args[spec.keyArg()] == null ? null : args[spec.keyArg()].toString();
        } else {
            key = headers.apply(spec.header());
        }
        if (key == null) {
            throw new IllegalArgumentException("no idempotency key for " + method.getName());
        }
        ObjectNode fp = Json.MAPPER.createObjectNode();
        fp.put("method", spec.name().isEmpty() ? method.getDeclaringClass().getName() + "." + method.getName()
            : spec.name());
        ArrayNode list = fp.putArray("args");
        for (int i = 0; i < args.length; i++) {
            if (i != spec.keyArg()) {
                list.add(Json.MAPPER.valueToTree(args[i]));
            }
        }
        Policy policy = Policy.defaults().withTtl(duration(spec.ttl())).withLease(duration(spec.lease()))
            .withWait(duration(spec.waitFor())).withExpiryHeaders(null, null);
        Object[] value = new Object[1];
        Exchange.Result r = new Exchange(idem, policy, false).run(key, scope.get(), fp, holding -> {
            try {
                value[0] = invocation.proceed();
            } catch (Exception e) {
                throw e;
            } catch (Throwable t) {
                throw new java.lang.reflect.UndeclaredThrowableException(t);
            }
            String json = Json.encode(value[0]);
            byte[] body = (json == null ? "null" : json).getBytes(StandardCharsets.UTF_8);
            return new Answer(200, List.of(Map.entry("Content-Type", "application/json")), body);
        });
        Answer a = r.answer();
        if (r.outcome() == null) {
            throw new IllegalArgumentException(a.status() == 401 ? "no idempotency scope for this call"
                : "invalid idempotency key: " + new String(a.body(), StandardCharsets.UTF_8));
        }
        if (r.failure() != null) {
            throw r.failure() instanceof java.lang.reflect.UndeclaredThrowableException u ? u.getCause() : r.failure();
        }
        if (r.outcome().holds()) {
            if (a.status() == 409) {
                throw new IdempotencyException.LeaseLostException("idempotency lease lost for key \"" + key
                    + "\": another call holds it now", null);
            }
            if (a.status() >= 500) {
                throw new IdempotencyException("the result of " + method.getName() + " was not stored: "
                    + new String(a.body(), StandardCharsets.UTF_8), null, null);
            }
            return value[0];
        }
        if (r.outcome() == ClaimOutcome.REPLAY) {
            JavaType type = Json.MAPPER.getTypeFactory().constructType(method.getGenericReturnType());
            if (method.getReturnType() == void.class) {
                return null;
            }
            return Json.MAPPER.readValue(a.body(), type);
        }
        if (r.outcome() == ClaimOutcome.IN_PROGRESS) {
            throw new KeyInProgressException("a call with idempotency key \"" + key + "\" is running",
                Long.parseLong(a.header("Retry-After")));
        }
        if (r.outcome() == ClaimOutcome.GONE) {
            throw new AnswerGoneException("the result for idempotency key \"" + key + "\" is gone; it does not run again");
        }
        throw new KeyMismatchException("idempotency key \"" + key + "\" was used with other arguments");
    }

    /** An interval's text ("1 day", "30 seconds", "500 ms") as a Duration; "" is null. */
    static Duration duration(String text) {
        if (text == null || text.isBlank()) {
            return null;
        }
        String[] p = text.trim().split("\\s+");
        long n = Long.parseLong(p[0]);
        String unit = p.length > 1 ? p[1].toLowerCase(java.util.Locale.ROOT) : "seconds";
        if (unit.startsWith("ms") || unit.startsWith("milli")) return Duration.ofMillis(n);
        if (unit.startsWith("s")) return Duration.ofSeconds(n);
        if (unit.startsWith("min")) return Duration.ofMinutes(n);
        if (unit.startsWith("h")) return Duration.ofHours(n);
        if (unit.startsWith("d")) return Duration.ofDays(n);
        throw new IllegalArgumentException("unknown unit in \"" + text + "\" (ms, seconds, minutes, hours, days)");
    }
}
