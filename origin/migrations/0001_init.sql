-- Pre-generated codes and the links they become. `id` is the issue order.
-- state: 0 free, 1 active, 2 reserved (kept out of issue), 3 disabled.
CREATE TABLE IF NOT EXISTS short_code (
  id             BIGINT UNSIGNED  NOT NULL,
  code           VARCHAR(32)      CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  state          TINYINT UNSIGNED NOT NULL DEFAULT 0,
  long_url       VARCHAR(8192)    CHARACTER SET ascii COLLATE ascii_bin NULL,
  domain         VARCHAR(253)     CHARACTER SET ascii COLLATE ascii_general_ci NULL,
  app            VARCHAR(64)      CHARACTER SET utf8mb4 NULL,
  client_app     VARCHAR(64)      CHARACTER SET utf8mb4 NULL,
  client_version VARCHAR(32)      CHARACTER SET utf8mb4 NULL,
  kdt_id         BIGINT UNSIGNED  NULL,
  created_at     BIGINT UNSIGNED  NULL,
  expires_at     BIGINT UNSIGNED  NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_code (code),
  KEY idx_state_id (state, id)
) ENGINE=InnoDB;

-- Durable counters: the issuer's (one row per issuer name) and the one that
-- numbers custom codes (ids from 2^40 up, far above any pre-generated id).
CREATE TABLE IF NOT EXISTS counter (
  name  VARCHAR(64) CHARACTER SET ascii NOT NULL,
  value BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB;

-- Installation facts: the permutation key, how far pre-generation got.
CREATE TABLE IF NOT EXISTS meta (
  name  VARCHAR(64)  CHARACTER SET ascii NOT NULL,
  value VARCHAR(255) CHARACTER SET ascii NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB;
