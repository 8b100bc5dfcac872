"""ios: the CoreML packages, contract and golden bundle for the SwiftUI sample app, and the app's
Foundation-only core compiled and tested with Swift.
"""
