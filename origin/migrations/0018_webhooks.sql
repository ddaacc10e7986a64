-- Issue 28 item 1: webhooks. Safe to run again.
--
-- webhook_endpoint (meta database): an app's endpoints. The secret is
-- sealed (AES-256-GCM, `webhooks.key`), never stored in the clear.
-- events: the event types it receives, comma-separated.
CREATE TABLE IF NOT EXISTS webhook_endpoint (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  public_id     CHAR(24)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  app           VARCHAR(64)  CHARACTER SET utf8mb4 NOT NULL,
  url           VARCHAR(2048) CHARACTER SET utf8mb4 NOT NULL,
  events        VARCHAR(255) CHARACTER SET ascii NOT NULL,
  description   VARCHAR(200) CHARACTER SET utf8mb4 NOT NULL DEFAULT '',
  secret_sealed VARCHAR(255) CHARACTER SET ascii NOT NULL,
  enabled       TINYINT      NOT NULL DEFAULT 1,
  created_at_ms BIGINT UNSIGNED NOT NULL,
  updated_at_ms BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_public (public_id),
  KEY idx_app (app, id)
) ENGINE=InnoDB;

-- webhook_event (every shard): the outbox. A row is inserted in the same
-- transaction as the change it announces (next to its audit row, only
-- for apps with an endpoint for that type) and deleted once copied into
-- webhook_delivery. Per link, ids follow the changes' commit order (every
-- change holds the link's row lock when it inserts).
CREATE TABLE IF NOT EXISTS webhook_event (
  id            BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  event_id      CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  app           VARCHAR(64)  CHARACTER SET utf8mb4 NOT NULL,
  code          VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  link          VARCHAR(300) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  type          VARCHAR(32)  CHARACTER SET ascii NOT NULL,
  at_ms         BIGINT UNSIGNED NOT NULL,
  data          TEXT         CHARACTER SET utf8mb4 NOT NULL,
  -- link.clicked: the digest's counts (JSON); NULL for other types.
  extra         VARCHAR(255) CHARACTER SET ascii NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB;

-- webhook_click_digest (every shard): clicks applied per link and digest
-- period (`webhooks.click_digest_secs`, Unix time / period), added in the
-- click batch's own transaction while some app wants link.clicked; a
-- period's rows become link.clicked events once it is over.
CREATE TABLE IF NOT EXISTS webhook_click_digest (
  link          VARCHAR(300) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  period        BIGINT UNSIGNED NOT NULL,
  human         BIGINT UNSIGNED NOT NULL,
  bot           BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (link, period)
) ENGINE=InnoDB;

-- webhook_delivery (meta database): one event for one endpoint, sent by
-- the origin holding the endpoint's lease (`leases`, webhook:<id>), with the
-- exact bytes sent (a resend repeats them). state: 0 pending, 1 delivered,
-- 2 dead (gave up). (endpoint_id, event_id) is unique: copying an event
-- twice (a crash between the two databases' commits) delivers it once.
-- seq orders one link's events (the shard's event id; a link never
-- changes shard).
CREATE TABLE IF NOT EXISTS webhook_delivery (
  id              BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  endpoint_id     BIGINT UNSIGNED NOT NULL,
  event_id        CHAR(36)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  type            VARCHAR(32)  CHARACTER SET ascii NOT NULL,
  link            VARCHAR(300) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  seq             BIGINT UNSIGNED NOT NULL,
  body            MEDIUMTEXT   CHARACTER SET utf8mb4 NOT NULL,
  state           TINYINT      NOT NULL DEFAULT 0,
  attempts        INT UNSIGNED NOT NULL DEFAULT 0,
  next_at_ms      BIGINT UNSIGNED NOT NULL,
  last_status     SMALLINT UNSIGNED NULL,
  last_error      VARCHAR(200) CHARACTER SET utf8mb4 NULL,
  last_latency_ms INT UNSIGNED NULL,
  created_at_ms   BIGINT UNSIGNED NOT NULL,
  finished_at_ms  BIGINT UNSIGNED NULL,
  PRIMARY KEY (id),
  UNIQUE KEY uk_endpoint_event (endpoint_id, event_id),
  -- The sender's lease (an endpoint's due deliveries), the counts per state.
  KEY idx_due (endpoint_id, state, next_at_ms),
  -- Order per link: is an earlier delivery of this link still pending?
  KEY idx_link (endpoint_id, link, state, seq),
  -- The log, newest first.
  KEY idx_endpoint (endpoint_id, id),
  -- The backlog figures, and pruning finished deliveries.
  KEY idx_state (state, created_at_ms),
  KEY idx_finished (finished_at_ms)
) ENGINE=InnoDB;
