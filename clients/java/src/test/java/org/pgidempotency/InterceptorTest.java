package org.pgidempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.pgidempotency.aop.Idempotent;
import org.pgidempotency.aop.IdempotentInterceptor;
import org.springframework.aop.framework.ProxyFactory;
import org.springframework.aop.support.DefaultPointcutAdvisor;
import org.springframework.aop.support.annotation.AnnotationMatchingPointcut;

/** @Idempotent through a real Spring AOP proxy (ProxyFactory with the README's Advisor). */
class InterceptorTest {
    public record Receipt(String id, int amount, int run) {
    }

    public interface Payments {
        Receipt pay(String key, int amount);

        List<Receipt> payMany(int amount);

        Receipt slow(String key, int ms);

        int plain();
    }

    public static class PaymentService implements Payments {
        final AtomicInteger runs = new AtomicInteger();

        @Override
        @Idempotent(keyArg = 0, ttl = "1 day")
        public Receipt pay(String key, int amount) {
            if (amount < 0) {
                runs.incrementAndGet();
                throw new IllegalArgumentException("negative amount");
            }
            return new Receipt("r-" + key, amount, runs.incrementAndGet());
        }

        @Override
        @Idempotent(header = "Idempotency-Key")
        public List<Receipt> payMany(int amount) {
            int run = runs.incrementAndGet();
            return List.of(new Receipt("a", amount, run), new Receipt("b", amount, run));
        }

        @Override
        @Idempotent(keyArg = 0)
        public Receipt slow(String key, int ms) {
            try {
                Thread.sleep(ms);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return new Receipt(key, ms, runs.incrementAndGet());
        }

        @Override
        public int plain() {
            return runs.incrementAndGet();
        }
    }

    static final ThreadLocal<Map<String, String>> HEADERS = ThreadLocal.withInitial(HashMap::new);
    static Idempotency idem;

    @BeforeAll
    static void setUp() {
        idem = new Idempotency(Db.dataSource());
    }

    static Payments proxy(PaymentService target, String tenant) {
        ProxyFactory factory = new ProxyFactory(target);
        factory.addAdvisor(new DefaultPointcutAdvisor(AnnotationMatchingPointcut.forMethodAnnotation(Idempotent.class),
            new IdempotentInterceptor(idem, () -> tenant, name -> HEADERS.get().get(name))));
        return (Payments) factory.getProxy();
    }

    @Test
    void runsOncePerKeyAndReplaysTheResult() {
        PaymentService target = new PaymentService();
        Payments payments = proxy(target, "tenant-1");
        String key = Db.unique("pay");
        Receipt first = payments.pay(key, 5);
        Receipt again = payments.pay(key, 5);
        assertEquals(first, again);
        assertNotSame(first, again);
        assertEquals(1, target.runs.get());
        assertThrows(IdempotentInterceptor.KeyMismatchException.class, () -> payments.pay(key, 6));
        // another tenant's key of the same name is another key
        assertEquals(2, proxy(target, "tenant-2").pay(key, 5).run());
        // a method without the annotation runs as it is
        assertEquals(3, payments.plain());
        assertEquals(4, payments.plain());
    }

    @Test
    void aFailureRunsAgain() {
        PaymentService target = new PaymentService();
        Payments payments = proxy(target, "");
        String key = Db.unique("neg");
        assertThrows(IllegalArgumentException.class, () -> payments.pay(key, -1));
        assertThrows(IllegalArgumentException.class, () -> payments.pay(key, -1));
        assertEquals(2, target.runs.get());
    }

    @Test
    void keysFromAHeaderAndGenericResults() {
        PaymentService target = new PaymentService();
        Payments payments = proxy(target, "");
        HEADERS.get().put("Idempotency-Key", Db.unique("hdr"));
        List<Receipt> first = payments.payMany(3);
        List<Receipt> again = payments.payMany(3);
        assertEquals(first, again);
        assertTrue(again.get(0) instanceof Receipt);
        assertEquals(1, target.runs.get());
        HEADERS.get().put("Idempotency-Key", "");
        assertThrows(IllegalArgumentException.class, () -> payments.payMany(3));
        HEADERS.get().remove("Idempotency-Key");
        assertThrows(IllegalArgumentException.class, () -> payments.payMany(3));
    }

    @Test
    void aConcurrentCallIsInProgress() throws Exception {
        PaymentService target = new PaymentService();
        Payments payments = proxy(target, "");
        String key = Db.unique("slow");
        CompletableFuture<Receipt> first = CompletableFuture.supplyAsync(() -> payments.slow(key, 800));
        Thread.sleep(300);
        var busy = assertThrows(IdempotentInterceptor.KeyInProgressException.class, () -> payments.slow(key, 800));
        assertTrue(busy.retryAfterSeconds() >= 1);
        assertEquals(first.get(), payments.slow(key, 800));
        assertEquals(1, target.runs.get());
    }
}
