// Versions pinned here and in app/build.gradle.kts; see mobile/README.md (Android) for the toolchain.
plugins {
    id("com.android.application") version "8.7.3" apply false
    id("org.jetbrains.kotlin.android") version "2.0.21" apply false
}
