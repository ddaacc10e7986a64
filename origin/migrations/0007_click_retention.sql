-- Issue 12: retention of the click rollups. Safe to run again.
--
-- Hourly rows are kept `clicks.retention_hours_days` (default 90), then only
-- the daily rows (referrers, devices) remain; batch ids are kept
-- `clicks.batch_ids_retention_days` (default 30), far longer than a batch
-- can stay in the stream or in an edge's buffer. The pruning deletes the
-- oldest rows in bounded batches, so each needs an index on its time.
-- ADD INDEX is online in MariaDB 10.11.
ALTER TABLE click_hour ADD INDEX IF NOT EXISTS idx_hour (hour);
ALTER TABLE click_batches ADD INDEX IF NOT EXISTS idx_applied (applied_at);
