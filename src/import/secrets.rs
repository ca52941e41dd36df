//! Whether a named value is, or may be, a credential. Errs towards yes: a value taken for a
//! secret costs the person one Secret key to fill in; a secret taken for a value would be
//! printed into a manifest.

/// Words of a name (split at `_`, `-`, `.` and camelCase) that say its value is a credential.
const SECRET_WORDS: [&str; 13] = [
    "key",
    "pass",
    "auth",
    "pat",
    "pw",
    "pwd",
    "cookie",
    "session",
    "private",
    "bearer",
    "authorization",
    "credential",
    "credentials",
];

/// Parts that make any word a credential's (`GITHUB_TOKEN`, `apikey`, `clientsecret`).
const SECRET_PARTS: [&str; 4] = ["token", "secret", "password", "apikey"];

fn words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in name.chars() {
        if !c.is_ascii_alphanumeric() {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            previous_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && previous_lower && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        word.push(c.to_ascii_lowercase());
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// Prefixes of well-known credential formats (GitHub, OpenAI/Anthropic, Slack, AWS, Google,
/// GitLab, Stripe, JWTs, HTTP auth schemes).
const SECRET_PREFIXES: [&str; 16] = [
    "ghp_",
    "gho_",
    "ghu_",
    "ghs_",
    "github_pat_",
    "sk-",
    "sk_",
    "xoxb-",
    "xoxp-",
    "akia",
    "aiza",
    "glpat-",
    "rk_",
    "eyj",
    "bearer ",
    "basic ",
];

/// True when `name` names a credential, or `value` has a credential's shape.
pub fn looks_secret(name: &str, value: &str) -> bool {
    let words = words(name);
    if words
        .iter()
        .any(|w| SECRET_WORDS.contains(&w.as_str()) || SECRET_PARTS.iter().any(|p| w.contains(p)))
    {
        return true;
    }
    let lower = value.to_ascii_lowercase();
    if SECRET_PREFIXES.iter().any(|p| lower.starts_with(p)) {
        return true;
    }
    // A URL with a password in it (postgres://user:pw@host).
    if let Ok(url) = url::Url::parse(value)
        && url.password().is_some()
    {
        return true;
    }
    random_looking(value)
}

/// Long, no separators a path, URL or sentence would have, letters and digits mixed, or
/// capitals and small letters mixed: how generated tokens look (a base62 token has no digit
/// often enough that the second shape matters; a CamelCase word taken for one costs a key).
fn random_looking(value: &str) -> bool {
    let has = |f: fn(&char) -> bool| value.chars().any(|c| f(&c));
    value.len() >= 20
        && !value.contains(['/', ' ', ':', '.', '@'])
        && (has(char::is_ascii_digit) && has(char::is_ascii_alphabetic)
            || has(char::is_ascii_uppercase) && has(char::is_ascii_lowercase))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_shapes_of_credentials() {
        for (name, value) in [
            ("GITHUB_PERSONAL_ACCESS_TOKEN", "x"),
            ("BRAVE_API_KEY", "abc"),
            ("DB_PASSWORD", "hunter2"),
            ("X", "ghp_16C7e42F292c6912E7710c838347Ae178B4a"),
            ("OPENAI", "sk-proj-abc"),
            ("DATABASE_URL", "postgres://app:s3cret@db:5432/app"),
            ("ANYTHING", "a8f5f167f44f4964e6c998dee827110c"),
            ("ANYTHING", "AaaAAAaAaAAAAAAaaaaaaAaa"),
            ("apiKey", "abc"),
            ("--client-secret", "abc"),
            ("X-Auth", "abc"),
        ] {
            assert!(looks_secret(name, value), "{name}={value}");
        }
        for (name, value) in [
            ("MEMORY_FILE_PATH", "/data/memory.json"),
            ("LOG_LEVEL", "debug"),
            ("KEYBOARD", "us"),
            ("PATH", "/usr/bin"),
            ("REGION", "eu-west-1"),
            ("ENDPOINT", "https://api.example.com/v1"),
            ("", "@modelcontextprotocol/server-filesystem"),
            ("", "/Users/me/Desktop"),
            ("", "-y"),
        ] {
            assert!(!looks_secret(name, value), "{name}={value}");
        }
    }
}
