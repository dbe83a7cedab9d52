// Descriptor pool and set writing (see descriptors.h).
#include "descriptors.h"

#include "device.h"

namespace es::vk {

DescriptorArena::DescriptorArena(Device& dev, std::vector<Dispatch>& ds) : dev_(dev) {
  uint32_t n_desc = 0;
  for (auto& d : ds)
    for (uint32_t c : d.pipe->binding_counts) n_desc += c;
  n_sets_ = ds.size();
  if (ds.empty()) return;
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, n_desc};
  VkDescriptorPoolCreateInfo ci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  ci.maxSets = uint32_t(ds.size());
  ci.poolSizeCount = 1;
  ci.pPoolSizes = &size;
  VK_CHECK(vkCreateDescriptorPool(dev.handle(), &ci, nullptr, &pool_));

  std::vector<VkDescriptorSetLayout> layouts;
  for (auto& d : ds) layouts.push_back(d.pipe->set_layout);
  std::vector<VkDescriptorSet> sets(ds.size());
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorPool = pool_;
  ai.descriptorSetCount = uint32_t(sets.size());
  ai.pSetLayouts = layouts.data();
  VK_CHECK(vkAllocateDescriptorSets(dev.handle(), &ai, sets.data()));

  std::vector<VkDescriptorBufferInfo> infos;
  infos.reserve(n_desc);
  std::vector<VkWriteDescriptorSet> writes;
  for (size_t i = 0; i < ds.size(); ++i) {
    Dispatch& d = ds[i];
    d.set = sets[i];
    ES_ASSERT(d.bindings.size() == d.pipe->binding_counts.size());
    for (size_t b = 0; b < d.bindings.size(); ++b) {
      ES_ASSERT(d.bindings[b].size() == d.pipe->binding_counts[b]);
      const size_t first = infos.size();
      for (auto& r : d.bindings[b]) infos.push_back({r.buffer, r.offset, r.size});
      VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
      w.dstSet = d.set;
      w.dstBinding = uint32_t(b);
      w.descriptorCount = uint32_t(d.bindings[b].size());
      w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      w.pBufferInfo = &infos[first];
      writes.push_back(w);
    }
  }
  vkUpdateDescriptorSets(dev.handle(), uint32_t(writes.size()), writes.data(), 0, nullptr);
}

DescriptorArena::~DescriptorArena() {
  if (pool_) vkDestroyDescriptorPool(dev_.handle(), pool_, nullptr);
}

}  // namespace es::vk
