-- Issue 25: link options (protocol 3.1.1). `options` holds a link's
-- forwarding, expiry fallback, targeting rules and UTM fields as JSON
-- (`origin/src/links/options.rs`, `Settings`); NULL for a plain link, which
-- is what every link created before this migration is. Safe to run again.
ALTER TABLE short_code
  ADD COLUMN IF NOT EXISTS options TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL;
