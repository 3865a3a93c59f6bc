/// What is wrong with an import, an env file or a piece of input, or why it could not be read.
///
/// The message names where (a file and line, an item's number, an entry's path, escaped for a
/// terminal) and never quotes a value, which may be a secret. `coffer` prints it and exits 2
/// for ``Kind/usage`` (the input is wrong: the same input fails again) and 1 for
/// ``Kind/failure`` (reading it failed: a file, a pipe, gpg).
package struct InterchangeError: Error, CustomStringConvertible, Sendable {
    package enum Kind: Sendable, Hashable {
        /// The input breaks its format or a limit.
        case usage
        /// Reading the input failed.
        case failure
    }

    package var kind: Kind
    package var message: String

    package init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    package static func usage(_ message: String) -> InterchangeError { InterchangeError(.usage, message) }

    package var description: String { message }
}
