/// The version `coffer --version` prints: the one place it is stated (CHANGELOG.md names it too).
/// Unreleased: a pre-release of the first version.
let cofferVersion = "0.1.0-dev"
