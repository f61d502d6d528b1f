package io.cdcmirror.hive;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.Base64;

import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.security.sasl.AuthenticationException;

import org.apache.hive.service.auth.PasswdAuthenticationProvider;

/**
 * HiveServer2 CUSTOM authentication for {@code cdc-mirror sql-server}: one user, whose password
 * is checked against a PBKDF2-HMAC-SHA256 hash.
 *
 * <p>HiveServer2 creates this class by name, without arguments, for each login
 * ({@code hive.server2.custom.authentication.class}), so the expected user and hash are handed
 * over once, before the server starts, with {@link #configure} (from Python, through the
 * py4j gateway): they never appear on a command line, in the environment or in Spark's
 * settings. Until then every login is refused.
 */
public final class SqlServerAuthenticator implements PasswdAuthenticationProvider {

  private record Credential(String user, int iterations, byte[] salt, byte[] hash) {}

  private static volatile Credential expected;

  /** Sets the one user allowed in; {@code salt} and {@code hash} in base64. */
  public static void configure(String user, int iterations, String salt, String hash) {
    Base64.Decoder base64 = Base64.getDecoder();
    expected = new Credential(user, iterations, base64.decode(salt), base64.decode(hash));
  }

  @Override
  public void Authenticate(String user, String password) throws AuthenticationException {
    Credential credential = expected;
    if (credential == null || user == null || password == null) {
      throw new AuthenticationException("authentication failed");
    }
    byte[] given = pbkdf2(password, credential.salt(), credential.iterations());
    boolean userMatches = MessageDigest.isEqual(
        user.getBytes(StandardCharsets.UTF_8), credential.user().getBytes(StandardCharsets.UTF_8));
    // Both compared in constant time, and the hash computed whatever the user.
    if (!(MessageDigest.isEqual(given, credential.hash()) & userMatches)) {
      throw new AuthenticationException("authentication failed for user " + user);
    }
  }

  private static byte[] pbkdf2(String password, byte[] salt, int iterations)
      throws AuthenticationException {
    PBEKeySpec spec = new PBEKeySpec(password.toCharArray(), salt, iterations, 256);
    try {
      return SecretKeyFactory.getInstance("PBKDF2WithHmacSHA256").generateSecret(spec).getEncoded();
    } catch (GeneralSecurityException exc) {
      throw new AuthenticationException("PBKDF2WithHmacSHA256 is unavailable", exc);
    } finally {
      spec.clearPassword();
    }
  }
}
