// What the integration tests share: a scratch directory (CofferTesting's TemporaryDirectory).
import CofferTesting

/// A fresh directory for one test (CofferTesting's ``TemporaryDirectory``), removed after it.
typealias Scratch = TemporaryDirectory
