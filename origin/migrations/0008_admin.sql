-- Issue 13: the admin console. Safe to run again.
--
-- Sessions live in MySQL so that every origin behind a load balancer
-- agrees on them (a sign-out on one is a sign-out everywhere). Only the
-- SHA-256 of the random 256-bit session id is stored.
CREATE TABLE IF NOT EXISTS admin_session (
  id_sha256     BINARY(32)      NOT NULL,
  user_name     VARCHAR(32)     CHARACTER SET ascii NOT NULL,
  csrf          CHAR(64)        CHARACTER SET ascii NOT NULL,
  created_at    BIGINT UNSIGNED NOT NULL,
  last_seen_at  BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (id_sha256),
  KEY idx_last_seen (last_seen_at)
) ENGINE=InnoDB;

-- The console's overview sums clicks per day over every link: a covering
-- index on the day avoids reading the whole rollup.
ALTER TABLE click_day_device ADD INDEX IF NOT EXISTS idx_day_class (day, class, n);
