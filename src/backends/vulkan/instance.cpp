// Vulkan instance creation, validation layer and message counting.
#include "instance.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "tuning.h"

namespace es::vk {
namespace {
std::atomic<int> g_messages{0};
std::mutex g_last_mu;
std::string g_last;

VKAPI_ATTR VkBool32 VKAPI_CALL OnMessage(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                         VkDebugUtilsMessageTypeFlagsEXT,
                                         const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
  if (severity < VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) return VK_FALSE;
  ++g_messages;
  std::lock_guard<std::mutex> lock(g_last_mu);
  g_last = data && data->pMessage ? data->pMessage : "?";
  std::fprintf(stderr, "vulkan validation: %s\n", g_last.c_str());
  return VK_FALSE;
}

}  // namespace

int ValidationMessageCount() { return g_messages.load(); }
std::string LastValidationMessage() {
  std::lock_guard<std::mutex> lock(g_last_mu);
  return g_last;
}

Instance& Instance::Get() {
  // Created once; a failure is remembered and re-thrown for every later caller.
  static std::mutex mu;
  static Instance* instance = nullptr;
  static std::string error;
  std::lock_guard<std::mutex> lock(mu);
  if (!instance && error.empty()) {
    try {
      instance = new Instance();  // lives until exit: drivers dislike teardown order at exit
    } catch (const Error& e) {
      error = e.what();
    }
  }
  if (!instance) throw Error(error);
  return *instance;
}

Instance::Instance() {
  LoadGlobalFunctions();
  VK_CHECK(vkEnumerateInstanceVersion(&api_version_));
  if (api_version_ < VK_API_VERSION_1_1)
    Fail("vulkan: the loader supports Vulkan ", VK_API_VERSION_MAJOR(api_version_), ".",
         VK_API_VERSION_MINOR(api_version_), "; edgeseek needs 1.1 or newer");

  std::vector<const char*> layers, extensions;
  validation_ = Tuning::Process().On(Knob::kValidation);
  if (validation_) {
    uint32_t n = 0;
    vkEnumerateInstanceLayerProperties(&n, nullptr);
    std::vector<VkLayerProperties> props(n);
    vkEnumerateInstanceLayerProperties(&n, props.data());
    bool found = false;
    for (auto& p : props) found |= std::strcmp(p.layerName, "VK_LAYER_KHRONOS_validation") == 0;
    if (!found)
      Fail(
          "vulkan: ES_VK_VALIDATION is set but VK_LAYER_KHRONOS_validation is not installed "
          "(apt install vulkan-validationlayers)");
    layers.push_back("VK_LAYER_KHRONOS_validation");
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  }
  {
    uint32_t n = 0;
    vkEnumerateInstanceExtensionProperties(nullptr, &n, nullptr);
    std::vector<VkExtensionProperties> props(n);
    vkEnumerateInstanceExtensionProperties(nullptr, &n, props.data());
    for (auto& p : props)
      if (std::strcmp(p.extensionName, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME) == 0)
        extensions.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
  }

  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "edgeseek";
  app.pEngineName = "edgeseek";
  app.apiVersion = api_version_ >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : api_version_;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  ci.enabledLayerCount = uint32_t(layers.size());
  ci.ppEnabledLayerNames = layers.data();
  ci.enabledExtensionCount = uint32_t(extensions.size());
  ci.ppEnabledExtensionNames = extensions.data();
  for (const char* e : extensions)
    if (std::strcmp(e, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME) == 0)
      ci.flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
  VK_CHECK(
      vkCreateInstance(&ci, nullptr, &instance_),
      " (is a Vulkan driver installed? e.g. mesa-vulkan-drivers; otherwise use --backend cpu)");
  LoadInstanceFunctions(instance_);
  if (validation_ && vkCreateDebugUtilsMessengerEXT) {
    VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
    mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                         VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mi.pfnUserCallback = OnMessage;
    VK_CHECK(vkCreateDebugUtilsMessengerEXT(instance_, &mi, nullptr, &messenger_));
  }
}

Instance::~Instance() {
  if (messenger_) vkDestroyDebugUtilsMessengerEXT(instance_, messenger_, nullptr);
  if (instance_) vkDestroyInstance(instance_, nullptr);
}

}  // namespace es::vk
