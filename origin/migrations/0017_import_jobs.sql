-- Issue 28 item 2: imports through the API (`POST /api/v1/imports`), one
-- row per job on the meta database (`mysql.url`). `running_app` is the
-- app while the job runs and NULL after: its unique key is what allows
-- one running import per app across every origin, decided by MySQL. A
-- job whose origin stopped is `running` with an old `updated_at_ms`: it
-- reads as `interrupted`, and the next import of its app marks it so.
-- Safe to run again.
CREATE TABLE IF NOT EXISTS import_jobs (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  public_id     CHAR(24)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  app           VARCHAR(64)  CHARACTER SET utf8mb4 NOT NULL,
  running_app   VARCHAR(64)  CHARACTER SET utf8mb4 NULL,
  format        VARCHAR(16)  CHARACTER SET ascii NOT NULL,
  dry_run       TINYINT      NOT NULL,
  state         VARCHAR(16)  CHARACTER SET ascii NOT NULL,
  summary       TEXT         CHARACTER SET utf8mb4 NOT NULL,
  refusals      MEDIUMTEXT   CHARACTER SET utf8mb4 NULL,
  error         VARCHAR(1000) CHARACTER SET utf8mb4 NULL,
  created_at_ms BIGINT UNSIGNED NOT NULL,
  updated_at_ms BIGINT UNSIGNED NOT NULL,
  finished_at_ms BIGINT UNSIGNED NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_public (public_id),
  UNIQUE KEY uk_running (running_app),
  KEY idx_app (app, id)
) ENGINE=InnoDB;
