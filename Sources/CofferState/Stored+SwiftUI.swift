#if canImport(SwiftUI)
public import SwiftUI

extension Stored {
    /// A SwiftUI binding that reads and writes this property.
    ///
    /// ```swift
    /// TextField("Name", text: model.$name.binding)
    /// ```
    public var binding: Binding<Value> {
        Binding(get: { self.wrappedValue }, set: { self.wrappedValue = $0 })
    }
}
#endif
