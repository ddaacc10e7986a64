// The OpenID provider of the console's single sign-on tests: the
// `oidc-provider` package (OpenID Certified) with its development
// interactions (a login form taking any password, then a consent page),
// plain HTTP on a loopback address (another one than the console's, so that
// the browser treats the two as different sites, as in production). One
// confidential client; PKCE required.
//
//   node provider.mjs <host> <port> <client_id> <client_secret> <redirect_uri>
//
// Accounts (the login name is the account; every password is accepted):
//   alice  groups [shorturl-admins]                       -> admin
//   otto   groups [shorturl-operators, staff]             -> operator
//   vera   groups [shorturl-viewers], merchants ["55"]    -> viewer of 55
//   mallory groups [shorturl-admins], merchants ["x"]     -> refused (bad binding)
//   nobody groups [staff]                                 -> refused (no role)
// Any other name has no groups. Prints "listening <issuer>" when ready.
import Provider from 'oidc-provider';

const [host, port, clientId, clientSecret, redirectUri] = process.argv.slice(2);
if (!redirectUri) {
  console.error('usage: node provider.mjs <host> <port> <client_id> <client_secret> <redirect_uri>');
  process.exit(2);
}
const issuer = `http://${host}:${port}`;

const accounts = {
  alice: { groups: ['shorturl-admins'], email: 'alice@example.com' },
  otto: { groups: ['shorturl-operators', 'staff'], email: 'otto@example.com' },
  vera: { groups: ['shorturl-viewers'], shorturl_merchants: ['55'], email: 'vera@example.com' },
  mallory: { groups: ['shorturl-admins'], shorturl_merchants: ['x'], email: 'mallory@example.com' },
  nobody: { groups: ['staff'], email: 'nobody@example.com' },
};

const provider = new Provider(issuer, {
  clients: [{
    client_id: clientId,
    client_secret: clientSecret,
    redirect_uris: [redirectUri],
    response_types: ['code'],
    grant_types: ['authorization_code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  pkce: { required: () => true },
  scopes: ['openid', 'profile', 'email', 'groups'],
  claims: {
    openid: ['sub'],
    profile: ['preferred_username'],
    email: ['email'],
    groups: ['groups', 'shorturl_merchants'],
  },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        return { sub: id, preferred_username: id, ...(accounts[id] ?? { groups: [] }) };
      },
    };
  },
  cookies: { keys: ['shorturl-test-provider-cookie-key'] },
});
// Plain HTTP on loopback: tell the provider no proxy terminates TLS.
provider.proxy = false;

provider.listen(Number(port), host, () => {
  console.log(`listening ${issuer}`);
});
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => process.exit(0));
