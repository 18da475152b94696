package org.pgidempotency;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import javax.sql.DataSource;
import org.junit.jupiter.api.Test;
import org.pgidempotency.aop.Idempotent;
import org.pgidempotency.aop.IdempotentInterceptor;
import org.springframework.aop.Advisor;
import org.springframework.aop.framework.Advised;
import org.springframework.aop.framework.autoproxy.DefaultAdvisorAutoProxyCreator;
import org.springframework.aop.support.AopUtils;
import org.springframework.aop.support.DefaultPointcutAdvisor;
import org.springframework.aop.support.annotation.AnnotationMatchingPointcut;
import org.springframework.context.annotation.AnnotationConfigApplicationContext;
import org.springframework.context.annotation.Bean;

/**
 * The README's Spring set-up: an Advisor bean, applied by the context's
 * auto-proxy creator (as Spring Boot's AOP auto-configuration does), to a
 * service bean whose methods are annotated.
 */
class SpringContextTest {
    public interface OrderService {
        String place(String orderId, int amount);
    }

    public static class Orders implements OrderService {
        int runs;

        @Override
        @Idempotent(keyArg = 0, ttl = "1 hour")
        public String place(String orderId, int amount) {
            runs++;
            return "order " + orderId + " for " + amount + " (run " + runs + ")";
        }
    }

    /** @Bean methods in lite mode: Debian's Spring 4.3 cannot subclass classes with CGLIB on Java 17. */
    public static class Config {
        @Bean
        public DataSource dataSource() {
            return Db.dataSource();
        }

        @Bean
        public Idempotency idempotency(DataSource dataSource) {
            Idempotency idem = new Idempotency(dataSource);
            idem.checkVersion();
            return idem;
        }

        @Bean
        public Advisor idempotentAdvisor(Idempotency idem) {
            return new DefaultPointcutAdvisor(AnnotationMatchingPointcut.forMethodAnnotation(Idempotent.class),
                new IdempotentInterceptor(idem, () -> "tenant-spring", name -> null));
        }

        @Bean
        public static DefaultAdvisorAutoProxyCreator autoProxy() {
            return new DefaultAdvisorAutoProxyCreator();
        }

        @Bean
        public OrderService orders() {
            return new Orders();
        }
    }

    @Test
    void anAdvisorBeanMakesAnnotatedMethodsIdempotent() throws Exception {
        try (AnnotationConfigApplicationContext ctx = new AnnotationConfigApplicationContext(Config.class)) {
            OrderService orders = ctx.getBean(OrderService.class);
            assertTrue(AopUtils.isAopProxy(orders));
            String key = Db.unique("spring");
            String first = orders.place(key, 5);
            assertEquals(first, orders.place(key, 5));
            assertThrows(IdempotentInterceptor.KeyMismatchException.class, () -> orders.place(key, 6));
            Orders target = (Orders) ((Advised) orders).getTargetSource().getTarget();
            assertEquals(1, target.runs);
        }
    }
}
