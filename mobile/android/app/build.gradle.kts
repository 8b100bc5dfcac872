plugins {
    id("com.android.application")
    id("org.jetbrains.kotlin.android")
}

android {
    namespace = "org.arrcoc.demo"
    compileSdk = 35

    defaultConfig {
        applicationId = "org.arrcoc.demo"
        minSdk = 24
        targetSdk = 35
        versionCode = 1
        versionName = "0.1"
        testInstrumentationRunner = "androidx.test.runner.AndroidJUnitRunner"
        // The ABIs the ExecuTorch AAR ships native libraries for.
        ndk { abiFilters += listOf("arm64-v8a", "x86_64") }
    }

    // Assets: Gradle's default folder, app/src/main/assets/, filled by `invoke build --target android`
    // (contract.json + the files it names). Not redefined here: tests/test_android.py checks that.

    buildTypes {
        release {
            isMinifyEnabled = false
        }
    }
    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }
    kotlinOptions {
        jvmTarget = "17"
    }
}

dependencies {
    // Must match the executorch release that wrote the .pte files (contract.json: app.runtime_maven).
    implementation("org.pytorch:executorch-android:1.5.1")
    implementation("androidx.activity:activity-ktx:1.9.3")
    implementation("androidx.exifinterface:exifinterface:1.3.7")

    // JVM unit tests (app/src/test, `./gradlew test`): the app's logic without a device. org.json:json
    // is a real org.json there (android.jar's classes are stubs that throw); the build runs the same
    // tests with Debian's libandroid-json-java (targets/android/app.py).
    testImplementation("junit:junit:4.13.2")
    testImplementation("org.json:json:20240303")

    androidTestImplementation("androidx.test.ext:junit:1.2.1")
    androidTestImplementation("androidx.test:runner:1.6.2")
}
