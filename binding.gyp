{
  "targets": [
    {
      "target_name": "maporl",
      "sources": [
        "<!@(node -p \"require('fs').readdirSync('native').filter(f => f.endsWith('.cpp')).map(f => 'native/' + f).join(' ')\")",
        "<!@(node -p \"require('fs').readdirSync('bindings').filter(f => f.endsWith('.cpp')).map(f => 'bindings/' + f).join(' ')\")"
      ],
      "include_dirs": [
        "<!(node -p \"require('node-addon-api').include_dir\")",
        "native/include",
        "native"
      ],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17", "-std=gnu++14", "-O2"],
      "cflags_cc": ["-std=c++17", "-O3", "-ffp-contract=off", "-fexceptions", "-fvisibility=hidden"],
      "ldflags": ["-pthread"],
      "xcode_settings": {
        "GCC_ENABLE_CPP_EXCEPTIONS": "YES",
        "CLANG_CXX_LANGUAGE_STANDARD": "c++17",
        "MACOSX_DEPLOYMENT_TARGET": "11.0"
      },
      "msvs_settings": {
        "VCCLCompilerTool": { "ExceptionHandling": 1, "AdditionalOptions": ["/std:c++17"] }
      }
    }
  ]
}
