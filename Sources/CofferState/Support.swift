import CofferCore
import Foundation

// Small generic helpers, chosen once per property at creation so the write path pays no
// protocol lookups.

enum ValueTraits {
    /// `==` when `T` is `Equatable` (found at run time, conditional conformances included).
    static func equality<T>(for type: T.Type) -> (@Sendable (T, T) -> Bool)? {
        guard let equatable = T.self as? any Equatable.Type else { return nil }
        let witness = equalityWitness(equatable)
        return { lhs, rhs in witness.equal(lhs, rhs) }
    }

    private static func equalityWitness<E: Equatable>(_: E.Type) -> any EqualityWitness { Equality<E>() }

    /// A test for `nil` when `T` is an `Optional`; `nil` otherwise.
    static func nilTest<T>(for type: T.Type) -> (@Sendable (T) -> Bool)? {
        guard let optional = T.self as? any OptionalValue.Type else { return nil }
        let witness = nilWitness(optional)
        return { value in witness.isNil(value) }
    }

    private static func nilWitness<O: OptionalValue>(_: O.Type) -> any NilWitness { NilTest<O>() }

    /// `ValueCodec` for `T` when `T` is `Codable` (found at run time, so a property of a
    /// `Codable` type persists whichever initialiser created it); `nil` otherwise.
    static func coding<T>(for type: T.Type) -> (any CodingWitness)? {
        guard let codable = T.self as? any Codable.Type else { return nil }
        return codingWitness(codable)
    }

    private static func codingWitness<C: Codable>(_: C.Type) -> any CodingWitness { Coding<C>() }

    /// The "zero" of a type that has one through a literal: `nil`, `false`, `0`, `""`, `[]`, `[:]`.
    static func literalZero<T>(of type: T.Type) -> T? {
        if let t = T.self as? any ExpressibleByNilLiteral.Type { return nilLiteral(t) as? T }
        if let t = T.self as? any ExpressibleByBooleanLiteral.Type { return falseLiteral(t) as? T }
        if let t = T.self as? any ExpressibleByIntegerLiteral.Type { return zeroLiteral(t) as? T }
        if let t = T.self as? any ExpressibleByStringLiteral.Type { return emptyString(t) as? T }
        if let t = T.self as? any ExpressibleByArrayLiteral.Type { return emptyArray(t) as? T }
        if let t = T.self as? any ExpressibleByDictionaryLiteral.Type { return emptyDictionary(t) as? T }
        return nil
    }

    private static func nilLiteral<T: ExpressibleByNilLiteral>(_: T.Type) -> T { nil }
    private static func falseLiteral<T: ExpressibleByBooleanLiteral>(_: T.Type) -> T { false }
    private static func zeroLiteral<T: ExpressibleByIntegerLiteral>(_: T.Type) -> T { 0 }
    private static func emptyString<T: ExpressibleByStringLiteral>(_: T.Type) -> T { "" }
    private static func emptyArray<T: ExpressibleByArrayLiteral>(_: T.Type) -> T { [] }
    private static func emptyDictionary<T: ExpressibleByDictionaryLiteral>(_: T.Type) -> T { [:] }
}

// Witnesses are structs rather than closures so that no closure captures a metatype.
protocol EqualityWitness: Sendable {
    func equal<T>(_ lhs: T, _ rhs: T) -> Bool
}

private struct Equality<E: Equatable>: EqualityWitness {
    func equal<T>(_ lhs: T, _ rhs: T) -> Bool {
        guard let lhs = lhs as? E, let rhs = rhs as? E else { return false }
        return lhs == rhs
    }
}

/// `ValueCodec` for a type known to be `Codable` only at run time.
protocol CodingWitness: Sendable {
    func encode<T>(_ value: T, as encoding: ValueEncoding) throws -> Data
    func decode<T>(_ type: T.Type, from data: Data, as encoding: ValueEncoding, source: String) throws -> T
}

private struct Coding<C: Codable>: CodingWitness {
    // `T` is always `C` (the witness is made for the cell's own value type), so the casts hold.
    func encode<T>(_ value: T, as encoding: ValueEncoding) throws -> Data {
        try ValueCodec.encode(value as! C, as: encoding)
    }

    func decode<T>(_ type: T.Type, from data: Data, as encoding: ValueEncoding, source: String) throws -> T {
        try ValueCodec.decode(C.self, from: data, as: encoding, source: source) as! T
    }
}

protocol NilWitness: Sendable {
    func isNil<T>(_ value: T) -> Bool
}

private struct NilTest<O: OptionalValue>: NilWitness {
    func isNil<T>(_ value: T) -> Bool { (value as? O)?.isNone ?? false }
}

protocol OptionalValue {
    var isNone: Bool { get }
}

extension Optional: OptionalValue {
    var isNone: Bool { self == nil }
}

extension CofferError {
    /// `error` as a `CofferError`: itself when it is one, else wrapped with `context`.
    ///
    /// Strategies are documented to throw `CofferError`; a custom one that throws something else
    /// is reported as an I/O failure of the strategy, with the original error as the cause.
    static func wrapping(_ error: any Error, _ context: @autoclosure () -> String) -> CofferError {
        if let error = error as? CofferError { return error }
        return CofferError(.io, "\(context()) failed: \(error)", cause: error)
    }
}

/// What a ``StoredCell`` needs that depends on its value type alone, made once per type and
/// shared by every cell of that type.
///
/// A key path into a generic class is instantiated at run time, from its mangled name, each
/// time the expression is evaluated (no cache: several microseconds each), and the `as?` casts of
/// ``ValueTraits`` search the conformance tables. A server creating a cell per key chosen at run
/// time paid both for every key; now it pays one dictionary lookup.
final class CellTypeTraits<Value: Sendable>: Sendable {
    // Key paths are immutable; `nonisolated(unsafe)` because `KeyPath` is not declared `Sendable`.
    nonisolated(unsafe) let valueKeyPath: KeyPath<StoredCell<Value>, Value> = \StoredCell<Value>.wrappedValue
    nonisolated(unsafe) let errorKeyPath: KeyPath<StoredCell<Value>, CofferError?> = \StoredCell<Value>.error
    let isEqual = ValueTraits.equality(for: Value.self)
    let isNil = ValueTraits.nilTest(for: Value.self)
    let coding = ValueTraits.coding(for: Value.self)

    private init() {}

    /// The traits of `Value`, made on the first call for the type.
    static var shared: CellTypeTraits<Value> {
        let type = ObjectIdentifier(Value.self)
        if let known = TypeTraitsCache.byType.withLock({ $0[type] }) {
            return unsafeDowncast(known, to: CellTypeTraits<Value>.self)
        }
        let made = CellTypeTraits<Value>()
        return TypeTraitsCache.byType.withLock { byType in
            if let known = byType[type] { return unsafeDowncast(known, to: CellTypeTraits<Value>.self) }
            byType[type] = made
            return made
        }
    }
}

/// The ``CellTypeTraits`` of each value type used so far (a handful per program: one entry per type, never per key).
private enum TypeTraitsCache {
    static let byType = Locked<[ObjectIdentifier: any AnyObject & Sendable]>([:])
}
