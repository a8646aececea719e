/** Sign-in: the one-time link `npm start` prints sets a session cookie; or an OIDC token from the company's identity provider. */
import { useState } from 'preact/hooks';
import { ApiError, api, setBearer } from '../api';
import { start } from '../state';

export function SignIn() {
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(null);
  return (
    <main id="main" class="signin">
      <h1>Sign in to Parley</h1>
      <p>
        Locally, open the <strong>login link</strong> that <code>npm start</code> printed (it works once, for
        15 minutes) and come back here.
      </p>
      <form
        onSubmit={async (e) => {
          e.preventDefault();
          setError(null);
          setBearer(token.trim());
          try {
            await api('/v1/me');
            await start();
          } catch (err) {
            setBearer(null);
            setError(err instanceof ApiError ? `${err.code}: ${err.message}` : String(err));
          }
        }}
      >
        <label for="token">Or paste a token from your identity provider (OIDC ID or access token)</label>
        <textarea
          id="token"
          rows={4}
          value={token}
          onInput={(e) => setToken(e.currentTarget.value)}
          required
        />
        <button type="submit">Sign in with token</button>
        {error ? (
          <p role="alert" class="error">
            {error}
          </p>
        ) : null}
      </form>
    </main>
  );
}
