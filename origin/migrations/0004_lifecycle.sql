-- Issue 11: link lifecycle. Every statement is safe to run again (a
-- migration interrupted before it was recorded is simply re-run).
--
-- short_code.state gains 5 expired: the reaper's tombstone for a link past
-- its expires_at. The row stays (URL and owner kept for the audit trail);
-- it never resolves; PATCH with a later expires_at renews it to active.
-- state: 0 free, 1 active, 2 reserved (kept out of issue), 3 disabled, 4 deleted, 5 expired.
--
-- reaped_at: Unix seconds when the reaper marked the row expired (NULL
-- otherwise; a renewal clears it, the audit trail keeps it).
-- idx_state_expires: the reaper's read, `state IN (active, disabled) AND
-- expires_at <= now`, is a range of this index per state, never a scan:
-- its cost follows the backlog, not the table (free rows sit at state 0).
-- ADD COLUMN at the end is instant in MariaDB 10.11; ADD INDEX is online.
ALTER TABLE short_code
  ADD COLUMN IF NOT EXISTS reaped_at BIGINT UNSIGNED NULL,
  ADD INDEX IF NOT EXISTS idx_state_expires (state, expires_at);

-- Named leases for work that one origin at a time does (the reaper): the
-- holder renews expires_at_ms (MySQL's clock, ms) by heartbeat; once it is
-- past, any origin may take the lease over (its holder died or hung).
CREATE TABLE IF NOT EXISTS leases (
  name          VARCHAR(64)  CHARACTER SET ascii NOT NULL,
  holder        VARCHAR(128) CHARACTER SET ascii NOT NULL,
  expires_at_ms BIGINT UNSIGNED NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB;
