-- Issue 28 item 5: console sign-in through an OpenID provider. Safe to run
-- again.
--
-- A provider's user is not in the configuration: the session row carries
-- what the provider's claims granted at sign-in (role, merchant binding),
-- NULL for a configured user (whose role is read from the configuration).
-- Names grow to 60 characters (an e-mail address as the name).
ALTER TABLE admin_session
  MODIFY user_name VARCHAR(60) CHARACTER SET ascii NOT NULL,
  ADD COLUMN IF NOT EXISTS sso_role VARCHAR(16) CHARACTER SET ascii NULL,
  ADD COLUMN IF NOT EXISTS sso_merchants VARCHAR(1024) CHARACTER SET ascii NULL;
