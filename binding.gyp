{
  "variables": {
    "maporl_cflags_cc": ["-std=c++17", "-O3", "-ffp-contract=off", "-fexceptions", "-fvisibility=hidden", "-fPIC"]
  },
  "target_defaults": {
    "include_dirs": ["native/include", "."],
    "cflags!": ["-fno-exceptions"],
    "cflags_cc!": ["-fno-exceptions", "-std=gnu++17", "-std=gnu++14", "-O2"],
    "cflags_cc": ["<@(maporl_cflags_cc)"],
    "xcode_settings": {
      "GCC_ENABLE_CPP_EXCEPTIONS": "YES",
      "CLANG_CXX_LANGUAGE_STANDARD": "c++17",
      "MACOSX_DEPLOYMENT_TARGET": "11.0"
    },
    "msvs_settings": {
      "VCCLCompilerTool": { "ExceptionHandling": 1, "AdditionalOptions": ["/std:c++17"] }
    }
  },
  "targets": [
    {
      "target_name": "maporl_avx512",
      "type": "static_library",
      "sources": ["<!@(node -p \"require('fs').readdirSync('native', { recursive: true }).filter(f => f.endsWith('_avx512.cpp')).sort().map(f => 'native/' + f).join(' ')\")"],
      "conditions": [["target_arch=='x64' and OS!='win'", { "cflags_cc": ["-mavx512f", "-mavx512dq", "-mavx512bw", "-mavx512vl"] }]]
    },
    {
      "target_name": "maporl_avx2",
      "type": "static_library",
      "sources": ["<!@(node -p \"require('fs').readdirSync('native', { recursive: true }).filter(f => f.endsWith('_avx2.cpp')).sort().map(f => 'native/' + f).join(' ')\")"],
      "conditions": [["target_arch=='x64' and OS!='win'", { "cflags_cc": ["-mavx2", "-mfma"] }]]
    },
    {
      "target_name": "maporl",
      "dependencies": ["maporl_avx512", "maporl_avx2"],
      "sources": [
        "<!@(node -p \"require('fs').readdirSync('native', { recursive: true }).filter(f => f.endsWith('.cpp') && !/_(avx512|avx2)\\.cpp$/.test(f)).sort().map(f => 'native/' + f).join(' ')\")",
        "<!@(node -p \"require('fs').readdirSync('bindings', { recursive: true }).filter(f => f.endsWith('.cpp')).sort().map(f => 'bindings/' + f).join(' ')\")"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "ldflags": ["-pthread"]
    }
  ]
}
